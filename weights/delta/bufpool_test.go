package delta

import (
	"bytes"
	"context"
	"crypto/subtle"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/asyncrl/asyncrl/weights/internal/ckpttest"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// poisonPool fills the buffer pool with large buffers of 0xA5 so a code
// path that reads pooled bytes it did not write shows up as wrong output.
func poisonPool(n int) {
	for range n {
		b := bytes.Repeat([]byte{0xA5}, 1<<20)
		putBuf(&b)
	}
}

// The pooled scratch buffers and reused encoders must not change a single
// output byte: each payload tensor must be exactly the frame a fresh patch
// encoder makes of XOR(new, base), with dirty buffers in the pool and
// several workers sharing it, and decode to that patch.
func TestPooledBuffersKeepPayloadBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 3))
	base := ckpttest.Random(r, 12, 512<<10)
	next := ckpttest.Update(r, base, 0.03, 5)
	bs, err := NewMemSource(base)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := NewMemSource(next)
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range []int{1, 3} {
		poisonPool(8)
		st, err := store.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultEncodeConfig()
		cfg.Level, cfg.Workers = level, 3
		cfg.MaxFileSizeGB = 64.0 / (1 << 20) // 64 KiB: several payload files
		m, err := Encode(context.Background(), cfg, bs, ns, 1, st)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Tensors) == 0 {
			t.Fatal("no tensor changed")
		}
		dec, err := zstd.NewReader(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer dec.Close()
		for _, e := range m.Tensors {
			pf, err := safetensors.Open(filepath.Join(st.Path(DeltaDir(1)), e.PayloadFile))
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := pf.ReadTensor(e.PayloadKey)
			pf.Close()
			if err != nil {
				t.Fatal(err)
			}
			nb, _, _ := ns.ReadTensor(e.Name)
			bb, _, _ := bs.ReadTensor(e.Name)
			patch := make([]byte, len(nb))
			subtle.XORBytes(patch, nb, bb)
			ref, err := newPatchEncoders(level, 1)
			if err != nil {
				t.Fatal(err)
			}
			pe := <-ref
			want, err := pe.encode(nil, nb, bb)
			ref <- pe
			ref.close()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("level %d: tensor %q: payload is %d bytes, a fresh encoder of the XOR patch gives %d (or the bytes differ)", level, e.Name, len(got), len(want))
			}
			if back, err := dec.DecodeAll(got, nil); err != nil || !bytes.Equal(back, patch) {
				t.Fatalf("level %d: tensor %q: payload does not decode to the XOR patch (err %v)", level, e.Name, err)
			}
			if sum := XXH3Hex(nb); sum != e.Checksum {
				t.Fatalf("level %d: tensor %q: checksum %s, want %s", level, e.Name, e.Checksum, sum)
			}
		}
	}
}

func TestGetBufLengthAndReuse(t *testing.T) {
	b := make([]byte, 100, 4096)
	putBuf(&b)
	for _, n := range []int{0, 1, 100, 4096, 5000} {
		p := getBuf(n)
		if len(*p) != n {
			t.Fatalf("getBuf(%d) has length %d", n, len(*p))
		}
		putBuf(p)
	}
	putBuf(nil) // a nil buffer (a failed decode) is ignored, not pooled
	empty := []byte{}
	putBuf(&empty)
}
