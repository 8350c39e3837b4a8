package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/asyncrl/asyncrl/tinker"
)

// AppendSampleResponse appends r as a tinker_public.SampleResponse, the
// form the SDK ≥ 0.25 reads a sample's result in
// (response_conv.deserialize_sample_response): per sequence the stop
// reason enum, the tokens as int32 little-endian bytes and the logprobs as
// float32 bytes (absent when the JSON form has none).
func AppendSampleResponse(b []byte, r tinker.SampleResponse) ([]byte, error) {
	for i, s := range r.Sequences {
		var stop uint64
		switch s.StopReason {
		case "stop":
			stop = StopReasonStop
		case "length":
			stop = StopReasonLength
		default:
			return nil, fmt.Errorf("sequence %d: stop_reason %q has no protobuf value (stop, length)", i, s.StopReason)
		}
		size := 0
		if stop != 0 {
			size += protowire.SizeTag(1) + protowire.SizeVarint(stop)
		}
		if len(s.Tokens) > 0 {
			size += protowire.SizeTag(2) + protowire.SizeBytes(4*len(s.Tokens))
		}
		if s.Logprobs != nil {
			size += protowire.SizeTag(3) + protowire.SizeBytes(4*len(s.Logprobs))
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		if stop != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, stop)
		}
		if len(s.Tokens) > 0 {
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(4*len(s.Tokens)))
			for _, t := range s.Tokens {
				b = binary.LittleEndian.AppendUint32(b, uint32(t))
			}
		}
		if s.Logprobs != nil {
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(4*len(s.Logprobs)))
			for _, l := range s.Logprobs {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(l))
			}
		}
	}
	return b, nil
}

// AppendForwardBackwardOutput appends o as a
// tinker_public.ForwardBackwardOutput, as the SDK ≥ 0.25 reads a forward or
// forward_backward result (response_conv.deserialize_forward_backward_output):
// the per-datum outputs as ArrayRecords, each field one BatchedTensor of
// every datum's values back to back with int64 byte offsets. A datum whose
// dtypes or trailing shapes differ from the one before starts a new record
// (the SDK reads several); every datum must have the same field names.
func AppendForwardBackwardOutput(b []byte, o tinker.ForwardBackwardOutput) ([]byte, error) {
	if o.LossFnOutputType != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, o.LossFnOutputType)
	}
	var names []string
	if len(o.LossFnOutputs) > 0 {
		for k := range o.LossFnOutputs[0] {
			names = append(names, k)
		}
		slices.Sort(names)
	}
	start := 0
	for i := 1; i <= len(o.LossFnOutputs); i++ {
		if i < len(o.LossFnOutputs) {
			same, err := sameLayout(o.LossFnOutputs[start], o.LossFnOutputs[i], names, i)
			if err != nil {
				return nil, err
			}
			if same {
				continue
			}
		}
		rec := appendRecord(nil, o.LossFnOutputs[start:i], names)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, rec)
		start = i
	}
	keys := make([]string, 0, len(o.Metrics))
	for k := range o.Metrics {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(protowire.SizeTag(1)+protowire.SizeBytes(len(k))+protowire.SizeTag(2)+protowire.SizeFixed64()))
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, 2, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(o.Metrics[k]))
	}
	return b, nil
}

func trailing(td tinker.TensorData) []int {
	if len(td.Shape) <= 1 {
		return nil
	}
	return td.Shape[1:]
}

// sameLayout reports whether datum b can share a record with a: the same
// dtypes and trailing shapes; an error when its field names differ.
func sameLayout(a, b tinker.LossFnOutput, names []string, i int) (bool, error) {
	if len(b) != len(names) {
		return false, fmt.Errorf("loss_fn_outputs[%d] has %d fields, loss_fn_outputs[0] %d: the protobuf form needs the same fields in every datum", i, len(b), len(names))
	}
	same := true
	for _, n := range names {
		tb, ok := b[n]
		if !ok {
			return false, fmt.Errorf("loss_fn_outputs[%d] lacks %q: the protobuf form needs the same fields in every datum", i, n)
		}
		ta := a[n]
		if ta.DType != tb.DType || !slices.Equal(trailing(ta), trailing(tb)) {
			same = false
		}
	}
	return same, nil
}

func dtypeOf(s string) (uint64, int) {
	if s == "int64" {
		return DTypeInt64, 8
	}
	return DTypeFloat32, 4
}

func appendRecord(b []byte, datums []tinker.LossFnOutput, names []string) []byte {
	for _, n := range names {
		first := datums[0][n]
		dt, size := dtypeOf(first.DType)
		total := 0
		for _, d := range datums {
			total += len(d[n].Data)
		}
		bt := make([]byte, 0, 16+total*size+8*(len(datums)+1))
		if total > 0 {
			bt = protowire.AppendTag(bt, 1, protowire.BytesType)
			bt = protowire.AppendVarint(bt, uint64(total*size))
			for _, d := range datums {
				for _, v := range d[n].Data {
					if dt == DTypeInt64 {
						bt = binary.LittleEndian.AppendUint64(bt, uint64(int64(v)))
					} else {
						bt = binary.LittleEndian.AppendUint32(bt, math.Float32bits(float32(v)))
					}
				}
			}
		}
		bt = protowire.AppendTag(bt, 2, protowire.BytesType)
		bt = protowire.AppendVarint(bt, uint64(8*(len(datums)+1)))
		off := 0
		bt = binary.LittleEndian.AppendUint64(bt, 0)
		for _, d := range datums {
			off += len(d[n].Data) * size
			bt = binary.LittleEndian.AppendUint64(bt, uint64(off))
		}
		bt = protowire.AppendTag(bt, 3, protowire.VarintType)
		bt = protowire.AppendVarint(bt, dt)
		if tr := trailing(first); len(tr) > 0 {
			packed := 0
			for _, s := range tr {
				packed += protowire.SizeVarint(uint64(int64(s)))
			}
			bt = protowire.AppendTag(bt, 4, protowire.BytesType)
			bt = protowire.AppendVarint(bt, uint64(packed))
			for _, s := range tr {
				bt = protowire.AppendVarint(bt, uint64(int64(s)))
			}
		}
		entry := protowire.AppendTag(nil, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, n)
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendBytes(entry, bt)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, entry)
	}
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(len(datums)))
}
