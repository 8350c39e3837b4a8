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
)

var dtypeSizes = map[DType]int{
	BOOL: 1, U8: 1, I8: 1, I16: 2, U16: 2, F16: 2, BF16: 2,
	I32: 4, U32: 4, F32: 4, F64: 8, I64: 8, U64: 8,
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
