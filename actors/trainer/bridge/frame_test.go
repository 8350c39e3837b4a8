package bridge

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	in := TrainBatch{Header: Header{V: 1, Type: TypeTrainBatch, ID: 7}, Step: 3,
		Arrays: map[string]Tensor{
			"tokens":           Int32Tensor([]int32{1, -2, 3}),
			"seq_offsets":      Int64Tensor([]int64{0, 1, 3}),
			"loss_mask":        Uint8Tensor([]uint8{0, 1, 1}),
			"rollout_logprobs": Float32Tensor([]float32{0, -0.5, -1.25}),
		},
		Groups: []string{"a", "b"}, Microbatches: [][]int{{1}, {0}}}
	body, err := EncodeFrame(&in)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteFrame(&buf, body); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(buf.Bytes()); int(got) != len(body) {
		t.Fatalf("length prefix %d, body %d bytes", got, len(body))
	}
	got, err := ReadFrame(&buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := DecodeHeader(got)
	if err != nil || h != in.Header {
		t.Fatalf("header %+v, %v", h, err)
	}
	var out TrainBatch
	if err := DecodeFrame(got, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in  %+v\n out %+v", in, out)
	}
	if v := out.Arrays["tokens"].Int32s(); !reflect.DeepEqual(v, []int32{1, -2, 3}) {
		t.Errorf("tokens %v", v)
	}
	if v := out.Arrays["rollout_logprobs"].Float32s(); !reflect.DeepEqual(v, []float32{0, -0.5, -1.25}) {
		t.Errorf("logprobs %v", v)
	}
	if _, err := ReadFrame(&buf, 0); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadFrameRefusesOversizeLength(t *testing.T) {
	var pre [4]byte
	binary.LittleEndian.PutUint32(pre[:], MaxFrameBytes+1)
	if _, err := ReadFrame(bytes.NewReader(pre[:]), 0); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("length 1 GiB + 1: %v, want ErrFrameTooLarge", err)
	}
	binary.LittleEndian.PutUint32(pre[:], 100)
	if _, err := ReadFrame(bytes.NewReader(append(pre[:], make([]byte, 100)...)), 99); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("length 100 over a limit of 99: %v, want ErrFrameTooLarge", err)
	}
	if err := WriteFrame(io.Discard, make([]byte, 0)); err != nil {
		t.Errorf("empty body: %v", err)
	}
}

func TestReadFrameTruncated(t *testing.T) {
	var pre [4]byte
	binary.LittleEndian.PutUint32(pre[:], 100)
	for name, data := range map[string][]byte{
		"inside the length": pre[:2],
		"inside the body":   append(pre[:], make([]byte, 10)...),
	} {
		if _, err := ReadFrame(bytes.NewReader(data), 0); !errors.Is(err, ErrTruncated) {
			t.Errorf("%s: %v, want ErrTruncated", name, err)
		}
	}
}

func TestDecodeHeaderErrors(t *testing.T) {
	notMap, _ := EncodeFrame([]int{1, 2})
	noV, _ := EncodeFrame(map[string]any{"type": "Init", "id": 1})
	v2, _ := EncodeFrame(map[string]any{"v": 2, "type": "Init", "id": 5})
	for name, tc := range map[string]struct {
		body []byte
		want error
	}{
		"not a map":   {notMap, ErrBadFrame},
		"not cbor":    {[]byte{0xff, 0x00}, ErrBadFrame},
		"no version":  {noV, ErrBadFrame},
		"version two": {v2, ErrUnsupportedVersion},
	} {
		if _, err := DecodeHeader(tc.body); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if h, _ := DecodeHeader(v2); h.ID != 5 {
		t.Errorf("unsupported version: id %d, want 5 (for the Error reply)", h.ID)
	}
}

func TestTensorCheck(t *testing.T) {
	good := Int64Tensor([]int64{1, 2})
	if err := good.Check(Int64, 2); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		t     Tensor
		dtype string
		n     int
	}{
		"dtype":       {good, Int32, 2},
		"length":      {good, Int64, 3},
		"2-D":         {Tensor{DType: Int64, Shape: []int64{1, 2}, Data: good.Data}, Int64, -1},
		"short data":  {Tensor{DType: Int64, Shape: []int64{2}, Data: good.Data[:15]}, Int64, 2},
		"negative n":  {Tensor{DType: Uint8, Shape: []int64{-1}}, Uint8, -1},
		"float bytes": {Tensor{DType: Float32, Shape: []int64{1}, Data: []byte{1, 2}}, Float32, 1},
	} {
		if err := tc.t.Check(tc.dtype, tc.n); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzReadFrame: the reader and header decoder never panic, never return
// a body over the limit, and fail only with their typed errors.
func FuzzReadFrame(f *testing.F) {
	body, _ := EncodeFrame(&Init{Header: Header{V: 1, Type: TypeInit, ID: 1}, OutDir: "/x"})
	var good bytes.Buffer
	_ = WriteFrame(&good, body)
	f.Add(good.Bytes())
	f.Add([]byte{})
	f.Add([]byte{4, 0, 0, 0, 0xa0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{2, 0, 0, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ReadFrame(bytes.NewReader(data), 1<<16)
		if err != nil {
			if err != io.EOF && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if len(b) > 1<<16 {
			t.Fatalf("body of %d bytes over the limit", len(b))
		}
		if _, err := DecodeHeader(b); err != nil && !errors.Is(err, ErrBadFrame) && !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("untyped header error %v", err)
		}
		var r Reply
		_ = DecodeFrame(b, &r)
	})
}
