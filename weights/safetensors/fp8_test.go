package safetensors

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// FP8 checkpoints must read and write with the dtype names of the
// safetensors spec (huggingface/safetensors: Dtype::F8_E4M3, F8_E5M2).
func TestFP8RoundTripWithSpecNames(t *testing.T) {
	in := []Tensor{
		{Name: "w.e4m3", DType: F8E4M3, Shape: []int64{2, 3}, Data: []byte{0x00, 0x38, 0x7e, 0x01, 0xb8, 0x7f}},
		{Name: "w.e5m2", DType: F8E5M2, Shape: []int64{4}, Data: []byte{0x3c, 0x7b, 0x7c, 0xc0}},
		// MXFP8 scales: the spec's F8_E8M0 (huggingface/safetensors
		// Dtype::F8_E8M0, safetensors ≥ 0.6), one byte each.
		{Name: "w.e4m3_scale", DType: F8E8M0, Shape: []int64{2, 1}, Data: []byte{127, 0xff}},
	}
	b, err := Marshal(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	hdr := string(b[8:200])
	if !strings.Contains(hdr, `"dtype":"F8_E4M3"`) || !strings.Contains(hdr, `"dtype":"F8_E5M2"`) || !strings.Contains(hdr, `"dtype":"F8_E8M0"`) {
		t.Fatalf("header does not spell the spec's dtype names: %s", hdr)
	}
	f, err := NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range in {
		got, info, err := f.ReadTensor(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		if info.DType != want.DType || !bytes.Equal(got, want.Data) {
			t.Fatalf("%s: %s %x, want %s %x", want.Name, info.DType, got, want.DType, want.Data)
		}
	}
}

// Values from the OCP 8-bit floating point spec (E4M3 without infinities,
// as torch.float8_e4m3fn; E5M2 as IEEE half's top byte).
func TestFP8DecodeTable(t *testing.T) {
	cases := []struct {
		d    DType
		b    byte
		want float64
	}{
		{F8E4M3, 0x00, 0},
		{F8E4M3, 0x38, 1},                 // exponent 7 = bias
		{F8E4M3, 0xb8, -1},                // sign bit
		{F8E4M3, 0x7e, 448},               // max normal 1.75·2^8
		{F8E4M3, 0x01, math.Ldexp(1, -9)}, // min subnormal 2^-3·2^-6
		{F8E4M3, 0x08, math.Ldexp(1, -6)}, // min normal
		{F8E4M3, 0x7f, math.NaN()},
		{F8E5M2, 0x3c, 1},
		{F8E5M2, 0xc0, -2},
		{F8E5M2, 0x7b, 57344},              // max normal 1.75·2^15
		{F8E5M2, 0x01, math.Ldexp(1, -16)}, // min subnormal
		{F8E5M2, 0x7c, math.Inf(1)},
		{F8E5M2, 0xfc, math.Inf(-1)},
		{F8E5M2, 0x7d, math.NaN()},
		// E8M0 (OCP MX spec, torch.float8_e8m0fnu): 2^(b−127), 255 NaN.
		{F8E8M0, 127, 1},
		{F8E8M0, 0, math.Ldexp(1, -127)},
		{F8E8M0, 254, math.Ldexp(1, 127)},
		{F8E8M0, 120, 1.0 / 128},
		{F8E8M0, 0xff, math.NaN()},
	}
	for _, tc := range cases {
		got, err := DecodeFloat32(tc.d, []byte{tc.b}, nil)
		if err != nil {
			t.Fatal(err)
		}
		g := float64(got[0])
		if math.IsNaN(tc.want) != math.IsNaN(g) || (!math.IsNaN(g) && g != tc.want) {
			t.Errorf("%s %#02x = %v, want %v", tc.d, tc.b, g, tc.want)
		}
	}
}
