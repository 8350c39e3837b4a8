package delta

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// patchCase is a pair of tensor byte strings of n bytes: next differs from
// base in a fraction of its bytes (dense = every byte random).
func patchCase(r *rand.Rand, n int, dense bool) (next, base []byte) {
	base = make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := i; j < min(i+8, n); j++ {
			base[j], v = byte(v), v>>8
		}
	}
	next = bytes.Clone(base)
	if dense {
		for i := range next {
			next[i] ^= byte(1 + r.IntN(255))
		}
		return next, base
	}
	for range max(n/50, 1) {
		next[r.IntN(n)] ^= byte(1 + r.IntN(255))
	}
	return next, base
}

// patchSizes straddle the XOR chunk (256 KiB), zstd's block (128 KiB) and
// klauspost's fastest window (8 MiB: the encoder slides its history).
var patchSizes = []int{1, 1000, xorChunk - 1, xorChunk, xorChunk + 1, 3*xorChunk + 77, 9<<20 + 5}

// Every frame declares its content size (Python's zstandard.decompress
// refuses a frame without one), carries no zstd checksum (xxh3-128 in the
// manifest covers the tensor), decodes to exactly next XOR base, and does
// not depend on what the reused encoder encoded before.
func TestPatchEncoderFrames(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	for _, level := range []int{1, 3} {
		used, err := newPatchEncoders(level, 1)
		if err != nil {
			t.Fatal(err)
		}
		pe := <-used
		for _, n := range patchSizes {
			for _, dense := range []bool{false, true} {
				if n > 1<<20 && (dense || level != 1) {
					continue // slow; level 1's sparse case covers the window
				}
				name := fmt.Sprintf("level %d, %d bytes, dense %v", level, n, dense)
				next, base := patchCase(r, n, dense)
				got, err := pe.encode([]byte("prefix"), next, base)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !bytes.HasPrefix(got, []byte("prefix")) {
					t.Fatalf("%s: encode did not append to dst", name)
				}
				got = got[len("prefix"):]
				var h zstd.Header
				if err := h.Decode(got); err != nil {
					t.Fatalf("%s: header: %v", name, err)
				}
				if !h.HasFCS || h.FrameContentSize != uint64(n) {
					t.Fatalf("%s: frame content size %v/%d, want %d", name, h.HasFCS, h.FrameContentSize, n)
				}
				if h.HasCheckSum {
					t.Fatalf("%s: frame has a zstd checksum", name)
				}
				patch := make([]byte, n)
				subtle.XORBytes(patch, next, base)
				back, err := dec.DecodeAll(got, nil)
				if err != nil || !bytes.Equal(back, patch) {
					t.Fatalf("%s: frame does not decode to the XOR patch (err %v)", name, err)
				}
				fresh, err := newPatchEncoders(level, 1)
				if err != nil {
					t.Fatal(err)
				}
				fe := <-fresh
				want, err := fe.encode(nil, next, base)
				fresh <- fe
				fresh.close()
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s: a reused encoder's frame differs from a fresh one's (err %v)", name, err)
				}
			}
		}
		used <- pe
		used.close()
	}
}

// The frames must decode with Python's zstandard both ways a receiver
// reads them: zstandard.decompress (one frame with its content size in the
// header) and the stream reader integrations/vllm/asyncrl_vllm/delta.py
// (decompress_patch) uses. Skipped without python3 and zstandard.
func TestPatchFramesDecodeInPython(t *testing.T) {
	py := "/usr/bin/python3" // Debian's, which has zstandard (the tests' Python)
	if _, err := os.Stat(py); err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			t.Skip("no python3")
		}
	}
	if err := exec.Command(py, "-c", "import zstandard").Run(); err != nil {
		t.Skip("python3 has no zstandard module")
	}
	r := rand.New(rand.NewPCG(8, 8))
	dir := t.TempDir()
	encs, err := newPatchEncoders(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	pe := <-encs
	defer func() { encs <- pe; encs.close() }()
	var names []string
	for i, n := range []int{1, 255, 1000, xorChunk + 1, 3*xorChunk + 77, 9<<20 + 5} {
		next, base := patchCase(r, n, false)
		frame, err := pe.encode(nil, next, base)
		if err != nil {
			t.Fatal(err)
		}
		patch := make([]byte, n)
		subtle.XORBytes(patch, next, base)
		name := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(name+".zst", frame, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name+".xor", patch, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	script := `
import io, sys, zstandard
for name in sys.argv[1:]:
    frame, want = open(name + ".zst", "rb").read(), open(name + ".xor", "rb").read()
    assert zstandard.decompress(frame) == want, name + ": zstandard.decompress"
    r = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(frame), read_across_frames=True)
    assert r.read() == want, name + ": stream_reader"
print("ok", len(sys.argv) - 1)
`
	out, err := exec.Command(py, append([]string{"-c", script}, names...)...).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != fmt.Sprintf("ok %d", len(names)) {
		t.Fatalf("python zstandard: %v\n%s", err, out)
	}
}
