package quant

import (
	"errors"
	"fmt"
	"slices"
)

// ErrFormat marks a quantised tensor or scale that does not fit its
// scheme (dtype, shape, size).
var ErrFormat = errors.New("quant: malformed")

// ErrUnknown marks a scheme name Lookup does not know.
var ErrUnknown = errors.New("quant: unknown scheme")

// Tensor is one stored tensor, with its dtype spelled as safetensors spells
// it ("F8_E4M3", "F32", "U8"), shape and little-endian bytes. The
// package stays free of I/O: callers move Tensors in and out of files.
type Tensor struct {
	Name  string
	DType string
	Shape []int64
	Data  []byte
}

// Scheme is one weight quantisation format: how a 2-D weight matrix
// becomes the tensors a checkpoint stores for it, and back.
type Scheme interface {
	// Name is the scheme's config name (publisher.quantize).
	Name() string
	// ScaleName is the companion tensor that holds weight's scales, the
	// way the checkpoints engines load name it.
	ScaleName(weight string) string
	// Quantize quantises the rows×cols row-major matrix w stored as
	// name: the quantised weight (named name), its scales (ScaleName)
	// and the error of the dequantised values against w.
	Quantize(name string, rows, cols int, w []float32) (weight, scale Tensor, st Stats, err error)
	// Dequantize widens weight and scale back into out (reused when it
	// is large enough): the values an engine serves.
	Dequantize(weight, scale Tensor, out []float32) ([]float32, error)
	// QuantizationConfig is config.json's "quantization_config" for a
	// checkpoint whose listed modules stay unquantised.
	QuantizationConfig(unquantised []string) map[string]any
}

// Names lists the schemes Lookup knows ("none" is no scheme).
func Names() []string { return []string{"fp8", "mxfp8"} }

// Lookup returns the scheme called name.
func Lookup(name string) (Scheme, error) {
	switch name {
	case "fp8":
		return FP8Block{BlockRows: 128, BlockCols: 128}, nil
	case "mxfp8":
		return MXFP8{}, nil
	}
	return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknown, name, Names())
}

// matrixShape checks that t is a rows×cols matrix of dtype with the given
// element size.
func matrixShape(t Tensor, dtype string, size int) (rows, cols int, err error) {
	if t.DType != dtype || len(t.Shape) != 2 || t.Shape[0] < 0 || t.Shape[1] < 0 {
		return 0, 0, fmt.Errorf("%w: tensor %q: %s %v, want a 2-D %s", ErrFormat, t.Name, t.DType, t.Shape, dtype)
	}
	rows, cols = int(t.Shape[0]), int(t.Shape[1])
	if int64(len(t.Data)) != int64(rows)*int64(cols)*int64(size) {
		return 0, 0, fmt.Errorf("%w: tensor %q: %d bytes for %s %v", ErrFormat, t.Name, len(t.Data), dtype, t.Shape)
	}
	return rows, cols, nil
}

func checkScaleShape(scale Tensor, want []int64) error {
	if !slices.Equal(scale.Shape, want) {
		return fmt.Errorf("%w: scale %q has shape %v, want %v", ErrFormat, scale.Name, scale.Shape, want)
	}
	return nil
}

func grow(out []float32, n int) []float32 {
	if cap(out) < n {
		return make([]float32, n)
	}
	return out[:n]
}
