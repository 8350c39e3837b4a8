package safetensors

import "fmt"

// DType is a safetensors element type, spelled as in the header.
type DType string

// The element types this package understands.
const (
	BOOL DType = "BOOL"
	U8   DType = "U8"
	I8   DType = "I8"
	I16  DType = "I16"
	U16  DType = "U16"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I32  DType = "I32"
	U32  DType = "U32"
	F32  DType = "F32"
	F64  DType = "F64"
	I64  DType = "I64"
	U64  DType = "U64"
	// F8E4M3 is 8-bit float E4M3 "fn" (torch.float8_e4m3fn: bias 7, no
	// infinities, S.1111.111 is NaN, max 448), spelled as the safetensors
	// spec spells it. FP8 checkpoints (DeepSeek-V3, Qwen FP8) store their
	// weights in it.
	F8E4M3 DType = "F8_E4M3"
	// F8E5M2 is 8-bit float E5M2 (torch.float8_e5m2: bias 15, IEEE-style
	// infinities and NaNs, max 57344).
	F8E5M2 DType = "F8_E5M2"
	// F8E8M0 is the 8-bit exponent-only scale of the OCP MX formats
	// (torch.float8_e8m0fnu: 2^(b−127), 255 is NaN, no zero, no sign).
	// MXFP8 checkpoints store their per-32-element scales in it.
	F8E8M0 DType = "F8_E8M0"
)

var dtypeSizes = map[DType]int{
	BOOL: 1, U8: 1, I8: 1, I16: 2, U16: 2, F16: 2, BF16: 2,
	I32: 4, U32: 4, F32: 4, F64: 8, I64: 8, U64: 8,
	F8E4M3: 1, F8E5M2: 1, F8E8M0: 1,
}

// Size returns the element size in bytes, or 0 for an unknown dtype.
func (d DType) Size() int { return dtypeSizes[d] }

// Valid reports whether d is a known dtype.
func (d DType) Valid() bool { return dtypeSizes[d] != 0 }

func (d DType) check() error {
	if !d.Valid() {
		return fmt.Errorf("%w: unknown dtype %q", ErrFormat, string(d))
	}
	return nil
}
