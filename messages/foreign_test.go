package messages

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// foreignStream writes a token batch the way a pyarrow producer typically
// would: every field nullable (pyarrow's default), list children named
// "element", columns in another order, built with ordinary builders.
// Two trajectories: [5 6 7] and [8], routes [T, L=1, K=2] of 4 experts.
func foreignStream(t testing.TB, nullAt int) []byte {
	t.Helper()
	mem := memory.NewGoAllocator()
	listOf := func(e arrow.DataType) arrow.DataType {
		return arrow.ListOfField(arrow.Field{Name: "element", Type: e, Nullable: true})
	}
	md := arrow.NewMetadata(
		[]string{MetaSchemaVersion, MetaRouteLayers, MetaRouteTopK, MetaNumExperts, MetaRouteDType},
		[]string{"1", "1", "2", "4", "uint8"})
	schema := arrow.NewSchema([]arrow.Field{
		{Name: ColRoutedExperts, Type: listOf(arrow.FixedSizeListOfField(2, arrow.Field{Name: "element", Type: arrow.PrimitiveTypes.Uint8, Nullable: true})), Nullable: true},
		{Name: ColTokenID, Type: listOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: ColLogprob, Type: listOf(arrow.PrimitiveTypes.Float32), Nullable: true},
		{Name: ColLossMask, Type: listOf(arrow.PrimitiveTypes.Uint8), Nullable: true},
		{Name: ColPolicyVersion, Type: listOf(arrow.PrimitiveTypes.Int32), Nullable: true},
		{Name: ColPromptLen, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: ColReward, Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: ColGroupID, Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: ColTrajectoryID, Type: arrow.BinaryTypes.String, Nullable: true},
	}, &md)
	rb := array.NewRecordBuilder(mem, schema)
	defer rb.Release()
	seqs := [][]int32{{5, 6, 7}, {8}}
	for _, s := range seqs {
		routes := rb.Field(0).(*array.ListBuilder)
		routes.Append(true)
		fsl := routes.ValueBuilder().(*array.FixedSizeListBuilder)
		for j := range s {
			fsl.Append(true)
			fsl.ValueBuilder().(*array.Uint8Builder).AppendValues([]uint8{uint8(j % 4), 3}, nil)
		}
		for c := 1; c <= 4; c++ {
			lb := rb.Field(c).(*array.ListBuilder)
			lb.Append(true)
			for j, tok := range s {
				switch vb := lb.ValueBuilder().(type) {
				case *array.Int32Builder:
					if c == 1 {
						vb.Append(tok)
					} else {
						vb.Append(int32(j))
					}
				case *array.Float32Builder:
					vb.Append(-0.5)
				case *array.Uint8Builder:
					vb.Append(1)
				}
			}
		}
	}
	rb.Field(5).(*array.Int32Builder).AppendValues([]int32{1, 0}, nil)
	rb.Field(6).(*array.Float32Builder).AppendValues([]float32{1, 0}, nil)
	if nullAt >= 0 {
		rb.Field(6).(*array.Float32Builder).AppendNull()
		rb.Field(5).(*array.Int32Builder).Append(0)
		rb.Field(7).(*array.StringBuilder).AppendValues([]string{"g", "g", "g"}, nil)
		rb.Field(8).(*array.StringBuilder).AppendValues([]string{"a", "b", "c"}, nil)
		for c := 0; c <= 4; c++ {
			rb.Field(c).(*array.ListBuilder).Append(true)
		}
	} else {
		rb.Field(7).(*array.StringBuilder).AppendValues([]string{"g", "g"}, nil)
		rb.Field(8).(*array.StringBuilder).AppendValues([]string{"a", "b"}, nil)
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecodeForeignWriter(t *testing.T) {
	tb, err := DecodeTokenBatch(foreignStream(t, -1))
	if err != nil {
		t.Fatal(err)
	}
	if tb.Len() != 2 || tb.NumTokens() != 4 || tb.Offsets[1] != 3 || tb.TrajectoryIDs[1] != "b" || tb.Routes == nil {
		t.Fatalf("decoded %+v", tb)
	}
	tr, err := tb.Trajectory(0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int32{0, 3, 1, 3, 2, 3}; len(tr.Routes) != 6 || tr.Routes[2] != want[2] || tr.Routes[5] != want[5] {
		t.Fatalf("routes %v, want %v", tr.Routes, want)
	}
	if tr.TokenIDs[2] != 7 || tr.PromptLen != 1 || tr.Reward != 1 {
		t.Fatalf("trajectory 0: %+v", tr)
	}
	// A null in any column is refused even though the field is nullable.
	if _, err := DecodeTokenBatch(foreignStream(t, 2)); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "nulls") {
		t.Fatalf("null reward: %v", err)
	}
}
