package delta_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// Publish version 1 from two in-memory checkpoints into a sync directory,
// then bring a copy of version 0 on disk up to version 1.
func Example() {
	tmp, _ := os.MkdirTemp("", "delta-example-*")
	defer os.RemoveAll(tmp)
	w0 := safetensors.EncodeBF16([]float32{0.5, -1, 2, 0.25})
	w1 := safetensors.EncodeBF16([]float32{0.5, -1, 2.5, 0.25}) // one element changed
	v0 := []safetensors.Tensor{{Name: "w", DType: safetensors.BF16, Shape: []int64{4}, Data: w0}}
	v1 := []safetensors.Tensor{{Name: "w", DType: safetensors.BF16, Shape: []int64{4}, Data: w1}}

	st, _ := store.NewLocal(filepath.Join(tmp, "sync"))
	base, _ := delta.NewMemSource(v0)
	next, _ := delta.NewMemSource(v1)
	m, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), base, next, 1, st)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Version, m.BaseVersion, m.Tensors[0].Name, m.Tensors[0].DType, m.PayloadFiles)

	// The engine side: a mutable copy of version 0, patched in place.
	ckpt := filepath.Join(tmp, "weights")
	os.MkdirAll(ckpt, 0o755)
	safetensors.WriteFile(filepath.Join(ckpt, safetensors.SingleFileName), v0, nil)
	mut, _ := delta.OpenMutable(ckpt)
	defer mut.Close()
	man, _ := delta.Fetch(context.Background(), st, 1, filepath.Join(tmp, "cache"), 2)
	if _, err := delta.Apply(context.Background(), delta.DefaultApplyConfig(), man, filepath.Join(tmp, "cache"), mut); err != nil {
		fmt.Println(err)
		return
	}
	got, _, _ := mut.ReadTensor("w")
	f, _ := safetensors.DecodeFloat32(safetensors.BF16, got, nil)
	fmt.Println(f)
	// Output:
	// 1 0 w bfloat16 [delta-rank00000-file000000.safetensors]
	// [0.5 -1 2.5 0.25]
}
