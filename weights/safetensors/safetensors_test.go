package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func sampleTensors() []Tensor {
	f32 := EncodeF32([]float32{1, -2.5, 3.25, float32(math.Inf(1)), 0, 7})
	return []Tensor{
		{Name: "a.f32", DType: F32, Shape: []int64{2, 3}, Data: f32},
		{Name: "b.bf16", DType: BF16, Shape: []int64{3}, Data: EncodeBF16([]float32{1, 0.5, -3})},
		{Name: "c.f16", DType: F16, Shape: []int64{2}, Data: EncodeF16([]float32{1.5, -0.25})},
		{Name: "d.u8", DType: U8, Shape: []int64{5}, Data: []byte{1, 2, 3, 4, 255}},
		{Name: "e.i8", DType: I8, Shape: []int64{1}, Data: []byte{0x80}},
		{Name: "f.i16", DType: I16, Shape: []int64{2}, Data: []byte{1, 0, 0xff, 0xff}},
		{Name: "g.i32", DType: I32, Shape: []int64{1, 1}, Data: []byte{42, 0, 0, 0}},
		{Name: "h.i64", DType: I64, Shape: []int64{1}, Data: []byte{9, 0, 0, 0, 0, 0, 0, 0x80}},
		{Name: "i.scalar", DType: F32, Shape: []int64{}, Data: EncodeF32([]float32{3})},
		{Name: "j.empty", DType: F32, Shape: []int64{0, 4}, Data: nil},
	}
}

func TestRoundTrip(t *testing.T) {
	ts := sampleTensors()
	meta := map[string]string{"format": "pt", "version": "3"}
	b, err := Marshal(ts, meta)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	if (8+n)%8 != 0 {
		t.Fatalf("data starts at %d, not 8-byte aligned", 8+n)
	}
	if b[8] != '{' || b[8+n-1] != ' ' && b[8+n-1] != '}' {
		t.Fatalf("header not a space-padded object: %q", b[8:8+n])
	}
	f, err := NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if !maps(f.Metadata, meta) {
		t.Fatalf("metadata %v, want %v", f.Metadata, meta)
	}
	var pos int64
	for i, want := range ts {
		got, info, err := f.ReadTensor(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want.Data) || info.DType != want.DType || !slices.Equal(info.Shape, want.Shape) {
			t.Fatalf("tensor %s: got %v %v %v", want.Name, info.DType, info.Shape, got)
		}
		// laid out contiguously in the given order
		if f.Tensors[i].Name != want.Name || info.Begin != pos {
			t.Fatalf("tensor %d is %s at %d, want %s at %d", i, f.Tensors[i].Name, info.Begin, want.Name, pos)
		}
		pos = info.End
	}
	if len(b) != int(8+n)+int(pos) {
		t.Fatalf("file has %d bytes, want %d", len(b), 8+n+uint64(pos))
	}
	fl, _, err := f.ReadFloat32("b.bf16")
	if err != nil || !slices.Equal(fl, []float32{1, 0.5, -3}) {
		t.Fatalf("bf16 decode %v %v", fl, err)
	}
	if _, _, err := f.ReadTensor("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing tensor: %v", err)
	}
	// Deterministic bytes.
	b2, _ := Marshal(ts, meta)
	if !bytes.Equal(b, b2) {
		t.Fatal("Marshal is not deterministic")
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestReferenceBytes checks the exact layout the reference writer produces
// for one I32 tensor: {"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}
// padded with spaces to 8-byte alignment.
func TestReferenceBytes(t *testing.T) {
	data := make([]byte, 16)
	b, err := Marshal([]Tensor{{Name: "test", DType: I32, Shape: []int64{2, 2}, Data: data}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	js := `{"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}}`
	padded := js + strings.Repeat(" ", (8-len(js)%8)%8)
	want := binary.LittleEndian.AppendUint64(nil, uint64(len(padded)))
	want = append(append(want, padded...), data...)
	if !bytes.Equal(b, want) {
		t.Fatalf("got\n%q\nwant\n%q", b, want)
	}
}

func TestStreamingReadOnlyTouchesOneTensor(t *testing.T) {
	b, _ := Marshal(sampleTensors(), nil)
	cr := &countingReaderAt{r: bytes.NewReader(b)}
	f, err := NewReader(cr, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	cr.n = 0
	sr, info, err := f.TensorReader("d.u8")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(sr)
	if !bytes.Equal(got, []byte{1, 2, 3, 4, 255}) || cr.n != info.Size() {
		t.Fatalf("read %v using %d bytes of I/O, want 5", got, cr.n)
	}
}

type countingReaderAt struct {
	r io.ReaderAt
	n int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}

func TestStreamWriterChecks(t *testing.T) {
	specs := []Spec{{"x", F32, []int64{2}}, {"y", U8, []int64{3}}}
	var buf bytes.Buffer
	sw, err := NewStreamWriter(&buf, specs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.WriteTensor("y", []byte{1, 2, 3}); !errors.Is(err, ErrFormat) {
		t.Fatalf("out-of-order tensor: %v", err)
	}
	if err := sw.WriteTensor("x", make([]byte, 7)); !errors.Is(err, ErrFormat) {
		t.Fatalf("wrong size: %v", err)
	}
	if err := sw.WriteTensor("x", EncodeF32([]float32{1, 2})); err != nil {
		t.Fatal(err)
	}
	if err := sw.Close(); !errors.Is(err, ErrFormat) {
		t.Fatalf("Close with a missing tensor: %v", err)
	}
	if err := sw.WriteTensor("y", []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Write([]byte{0}); !errors.Is(err, ErrFormat) {
		t.Fatalf("write past layout: %v", err)
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewReader(bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
		t.Fatalf("streamed file does not parse: %v", err)
	}
	for name, bad := range map[string][]Spec{
		"duplicate": {{"x", F32, []int64{1}}, {"x", F32, []int64{1}}},
		"dtype":     {{"x", "F8", []int64{1}}},
		"negative":  {{"x", F32, []int64{-1}}},
		"reserved":  {{"__metadata__", F32, []int64{1}}},
	} {
		if _, err := NewStreamWriter(io.Discard, bad, nil); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// file builds a raw file from a header string and data length.
func file(header string, data int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), make([]byte, data)...)
}

func TestMalformed(t *testing.T) {
	ok := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	cases := []struct {
		name string
		b    []byte
		msg  string
	}{
		{"too short", []byte{1, 2, 3}, "too short"},
		{"header beyond file", append(binary.LittleEndian.AppendUint64(nil, 1000), "{}"...), "past the end"},
		{"header too large", binary.LittleEndian.AppendUint64(nil, MaxHeaderSize+1), "exceeds"},
		{"bad json", file(`{"a":{"dtype":"F32",`, 0), "unexpected EOF"},
		{"bad json key", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},}`, 4), "header JSON"},
		{"not an object", file(`[1,2]`, 0), "not a JSON object"},
		{"trailing garbage", file(ok+`x`, 8), "trailing"},
		{"unknown dtype", file(`{"a":{"dtype":"F8_E4M3X","shape":[2],"data_offsets":[0,2]}}`, 2), "unknown dtype"},
		{"duplicate", file(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), "duplicate"},
		{"size mismatch", file(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), "needs 12 bytes"},
		{"overlap", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, 6), "overlap"},
		{"gap", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[5,9]}}`, 9), "gap"},
		{"offsets out of range", file(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, 2), "file holds 2"},
		{"extra data", file(ok, 9), "file holds 9"},
		{"reversed offsets", file(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, 4), "out of order"},
		{"negative dim", file(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}}`, 0), "negative"},
		{"overflowing shape", file(`{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, 8), "overflow"},
		{"missing offsets", file(`{"a":{"dtype":"U8","shape":[1]}}`, 1), "data_offsets"},
		{"bad metadata", file(`{"__metadata__":{"k":1}}`, 0), "__metadata__"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(c.b), int64(len(c.b)))
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("err = %v, want ErrFormat containing %q", err, c.msg)
			}
		})
	}
	if _, err := NewReader(bytes.NewReader(file(ok, 8)), 16+int64(len(ok))); err != nil {
		t.Fatalf("control case: %v", err)
	}
}

func TestBF16Conversion(t *testing.T) {
	cases := []struct {
		in   uint32 // float32 bits
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1.0
		{0x3f808000, 0x3f80}, // tie, even stays
		{0x3f818000, 0x3f82}, // tie, odd rounds up
		{0x3f808001, 0x3f81}, // above tie
		{0x3f807fff, 0x3f80}, // below tie
		{0xbf808001, 0xbf81}, // negative
		{0x7f7fffff, 0x7f80}, // max float rounds to +Inf
		{0x7f800000, 0x7f80}, // +Inf
		{0xff800000, 0xff80}, // -Inf
		{0x00000001, 0x0000}, // tiny subnormal → 0
		{0x80000000, 0x8000}, // -0
		{math.Float32bits(3.140625), 0x4049},
	}
	for _, c := range cases {
		if got := BF16FromFloat32(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("BF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	nan := BF16FromFloat32(math.Float32frombits(0x7f800001)) // signalling NaN with low payload
	if !math.IsNaN(float64(Float32FromBF16(nan))) {
		t.Errorf("NaN became %#04x", nan)
	}
	// Every bf16 value survives widening and rounding.
	for h := 0; h < 1<<16; h++ {
		f := Float32FromBF16(uint16(h))
		if f != f {
			continue
		}
		if got := BF16FromFloat32(f); got != uint16(h) {
			t.Fatalf("round trip %#04x → %v → %#04x", h, f, got)
		}
	}
}

func TestF16Conversion(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65519, 0x7bff}, {65520, 0x7c00},
		{float32(math.Inf(-1)), 0xfc00}, {0.5, 0x3800},
		{6.103515625e-05, 0x0400},    // min normal 2^-14
		{5.960464477539063e-08, 1},   // min subnormal 2^-24
		{2.98023223876953125e-08, 0}, // 2^-25: tie → even (0)
		{4.470348358154297e-08, 1},   // 1.5 × 2^-25 → 1
		{1 + 1.0/2048, 0x3c00},       // tie between 1 and 1+2^-10 → even
		{1 + 3.0/2048, 0x3c02},       // tie → even (up)
	}
	for _, c := range cases {
		if got := F16FromFloat32(c.in); got != c.want {
			t.Errorf("F16(%v) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	for h := 0; h < 1<<16; h++ {
		f := Float32FromF16(uint16(h))
		if f != f {
			continue
		}
		if got := F16FromFloat32(f); got != uint16(h) {
			t.Fatalf("round trip %#04x → %v → %#04x", h, f, got)
		}
	}
}

func TestShardedRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ts := sampleTensors()
	files, err := WriteSharded(dir, ts, 16, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	if files[len(files)-1] != IndexFileName || len(files) < 4 {
		t.Fatalf("files %v: want several shards and an index", files)
	}
	var idx Index
	js, _ := os.ReadFile(filepath.Join(dir, IndexFileName))
	if err := json.Unmarshal(js, &idx); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, tt := range ts {
		total += int64(len(tt.Data))
	}
	if idx.Metadata.TotalSize != total || len(idx.WeightMap) != len(ts) {
		t.Fatalf("index %+v", idx)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, want := range ts {
		got, _, err := c.ReadTensor(want.Name)
		if err != nil || !bytes.Equal(got, want.Data) {
			t.Fatalf("%s: %v %v", want.Name, got, err)
		}
	}
	if c.Metadata()["format"] != "pt" {
		t.Fatalf("metadata %v", c.Metadata())
	}

	// A broken index is reported.
	idx.WeightMap["a.f32"] = files[1]
	js, _ = json.Marshal(idx)
	os.WriteFile(filepath.Join(dir, IndexFileName), js, 0o644)
	if _, err := OpenDir(dir); !errors.Is(err, ErrFormat) {
		t.Fatalf("wrong weight_map: %v", err)
	}
}

func TestSingleFileDir(t *testing.T) {
	dir := t.TempDir()
	// A stale index from a previous sharded save must not shadow the file.
	if _, err := WriteSharded(dir, sampleTensors(), 16, nil); err != nil {
		t.Fatal(err)
	}
	files, err := WriteSharded(dir, sampleTensors()[:2], 0, nil)
	if err != nil || !slices.Equal(files, []string{SingleFileName}) {
		t.Fatalf("%v %v", files, err)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !slices.Equal(c.Names(), []string{"a.f32", "b.bf16"}) {
		t.Fatalf("names %v", c.Names())
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add([]byte(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`), int64(8))
	f.Add([]byte(`{"__metadata__":{"k":"v"},"a":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`), int64(1))
	f.Add([]byte(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`), int64(6))
	f.Add([]byte(`{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`), int64(8))
	f.Add([]byte(`{}   `), int64(0))
	f.Add([]byte(`{"a":1}`), int64(0))
	f.Fuzz(func(t *testing.T, js []byte, dataLen int64) {
		h, err := ParseHeader(js, dataLen)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error does not wrap ErrFormat: %v", err)
			}
			return
		}
		// An accepted header tiles its data exactly and re-encodes to a
		// header that parses to the same tensors.
		var pos int64
		for _, ti := range h.Tensors {
			if ti.Begin != pos || ti.Size() != ti.NumElements()*int64(ti.DType.Size()) {
				t.Fatalf("accepted inconsistent tensor %+v", ti)
			}
			pos = ti.End
		}
		if dataLen >= 0 && pos != dataLen {
			t.Fatalf("accepted %d bytes of tensors for %d data bytes", pos, dataLen)
		}
		enc, err := encodeHeader(h.Tensors, h.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := ParseHeader(enc, pos)
		if err != nil || len(h2.Tensors) != len(h.Tensors) {
			t.Fatalf("re-encoded header rejected: %v", err)
		}
	})
}
