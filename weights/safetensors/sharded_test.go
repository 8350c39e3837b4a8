package safetensors

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWrittenFilesAreWorldReadable: every file WriteSharded leaves (shards,
// index, a single model.safetensors) is mode 0644, not os.CreateTemp's 0600
// — a vLLM server running as another user must be able to read them.
func TestWrittenFilesAreWorldReadable(t *testing.T) {
	tensors := []Tensor{
		{Name: "a", DType: F32, Shape: []int64{64}, Data: make([]byte, 256)},
		{Name: "b", DType: F32, Shape: []int64{64}, Data: make([]byte, 256)},
	}
	for _, shard := range []int64{0, 300} {
		dir := t.TempDir()
		names, err := WriteSharded(dir, tensors, shard, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			st, err := os.Stat(filepath.Join(dir, n))
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != FileMode {
				t.Errorf("shard size %d: %s has mode %v, want %v", shard, n, st.Mode().Perm(), os.FileMode(FileMode))
			}
		}
	}
}
