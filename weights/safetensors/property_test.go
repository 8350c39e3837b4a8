package safetensors

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestRoundTripProperty writes random tensor sets (any dtype, any shape
// including scalars and zero-size) and reads every tensor back exactly,
// directly and through a sharded directory.
func TestRoundTripProperty(t *testing.T) {
	dtypes := []DType{BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64}
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 6).Draw(rt, "n")
		var ts []Tensor
		for i := range n {
			d := rapid.SampledFrom(dtypes).Draw(rt, "dtype")
			shape := rapid.SliceOfN(rapid.Int64Range(0, 4), 0, 3).Draw(rt, "shape")
			elems := int64(1)
			for _, s := range shape {
				elems *= s
			}
			data := rapid.SliceOfN(rapid.Byte(), int(elems)*d.Size(), int(elems)*d.Size()).Draw(rt, "data")
			ts = append(ts, Tensor{Name: fmt.Sprintf("t%d.%s", i, d), DType: d, Shape: shape, Data: data})
		}
		var meta map[string]string
		if rapid.Bool().Draw(rt, "meta") {
			meta = map[string]string{"k": rapid.String().Draw(rt, "v")}
		}
		b, err := Marshal(ts, meta)
		if err != nil {
			rt.Fatal(err)
		}
		f, err := NewReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			rt.Fatalf("own output rejected: %v", err)
		}
		if len(f.Tensors) != len(ts) {
			rt.Fatalf("%d tensors read, %d written", len(f.Tensors), len(ts))
		}
		for _, want := range ts {
			got, info, err := f.ReadTensor(want.Name)
			if err != nil || !bytes.Equal(got, want.Data) || info.DType != want.DType || !slices.Equal(info.Shape, want.Shape) {
				rt.Fatalf("%s: %v %v %v", want.Name, info, got, err)
			}
		}
		if meta != nil && f.Metadata["k"] != meta["k"] {
			rt.Fatalf("metadata %v", f.Metadata)
		}
		if n == 0 {
			return
		}
		dir := t.TempDir()
		if _, err := WriteSharded(dir, ts, rapid.Int64Range(1, 64).Draw(rt, "shard"), meta); err != nil {
			rt.Fatal(err)
		}
		c, err := OpenDir(dir)
		if err != nil {
			rt.Fatal(err)
		}
		defer c.Close()
		for _, want := range ts {
			got, _, err := c.ReadTensor(want.Name)
			if err != nil || !bytes.Equal(got, want.Data) {
				rt.Fatalf("sharded %s: %v %v", want.Name, got, err)
			}
		}
	})
}
