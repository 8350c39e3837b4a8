package messages

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// view returns s with its capacity capped, so appending to a decoded batch
// reallocates instead of writing into the neighbouring Arrow buffer.
//
// Decoded per-token columns are views into the IPC body buffer, not copies:
// that buffer was read out of the input by Arrow (so nothing aliases the
// caller's bytes), it lives on the Go heap (memory.GoAllocator, whose Free is
// a no-op), and so it stays valid after the reader is released. This halves
// decode memory for a 25 MB routed batch.
func view[T any](s []T) []T { return s[:len(s):len(s)] }

// fromRecord validates every column's buffers (array.ValidateFull) before any
// typed access, then copies the values out.
func fromRecord(rec arrow.RecordBatch, spec BatchSpec, index map[string]int) (*TokenBatch, error) {
	if err := validateColumns(rec); err != nil {
		return nil, err
	}
	col := func(name string) arrow.Array { return rec.Column(index[name]) }
	B := int(rec.NumRows())
	tb, err := NewTokenBatch(spec)
	if err != nil {
		return nil, malformed("%v", err)
	}
	tb.TrajectoryIDs = copyStrings(col(ColTrajectoryID).(*array.String))
	tb.GroupIDs = copyStrings(col(ColGroupID).(*array.String))
	tb.Rewards = append([]float32(nil), col(ColReward).(*array.Float32).Float32Values()...)
	tb.PromptLens = append([]int32(nil), col(ColPromptLen).(*array.Int32).Int32Values()...)

	tokens := col(ColTokenID).(*array.List)
	offs := tokens.Offsets()
	if len(offs) != B+1 || offs[0] != 0 {
		return nil, malformed("%s offsets: %d entries starting at %v, want %d starting at 0", ColTokenID, len(offs), offs[:min(1, len(offs))], B+1)
	}
	tb.Offsets = append([]int32(nil), offs...)
	lr := listReader{offs: offs, T: int(offs[B])}
	if err := lr.readTokenColumns(tb, col); err != nil {
		return nil, err
	}
	if err := lr.readRoutes(tb, col); err != nil {
		return nil, err
	}
	if err := lr.readSupport(tb, col); err != nil {
		return nil, err
	}
	if err := tb.Validate(); err != nil {
		return nil, err
	}
	return tb, nil
}

// validateColumns checks every column's buffers and that none holds nulls.
func validateColumns(rec arrow.RecordBatch) error {
	for i, c := range rec.Columns() {
		if err := array.ValidateFull(c); err != nil {
			return malformed("column %s: %v", rec.ColumnName(i), err)
		}
		if err := noNulls(c.Data()); err != nil {
			return malformed("column %s: %v", rec.ColumnName(i), err)
		}
	}
	return nil
}

// listReader reads the per-token list columns of one record: offs are
// token_id's offsets and T the token count they describe.
type listReader struct {
	offs []int32
	T    int
}

// values returns the flat child of a list column after checking it shares
// token_id's offsets and holds exactly T·width values.
func (lr listReader) values(c arrow.Array, name string, width int) (arrow.Array, error) {
	offs, T := lr.offs, lr.T
	l := c.(*array.List)
	o := l.Offsets()
	if len(o) != len(offs) {
		return nil, malformed("column %s: %d offsets, want %d", name, len(o), len(offs))
	}
	for i := range o {
		if o[i] != offs[i] {
			return nil, malformed("column %s: offsets[%d]=%d differs from %s offsets %d", name, i, o[i], ColTokenID, offs[i])
		}
	}
	v := l.ListValues()
	if v.Len() != T || v.Data().Offset() != 0 {
		return nil, malformed("column %s: %d values (offset %d), want %d", name, v.Len(), v.Data().Offset(), T)
	}
	if width == 0 {
		return v, nil
	}
	f := v.(*array.FixedSizeList).ListValues()
	if f.Len() != T*width || f.Data().Offset() != 0 {
		return nil, malformed("column %s: %d flat values, want %d × %d", name, f.Len(), T, width)
	}
	return f, nil
}

// readTokenColumns fills token ids, logprobs, loss mask, policy versions and
// (when the spec has them) token rewards.
func (lr listReader) readTokenColumns(tb *TokenBatch, col func(string) arrow.Array) error {
	v, err := lr.values(col(ColTokenID), ColTokenID, 0)
	if err != nil {
		return err
	}
	tb.TokenIDs = view(v.(*array.Int32).Int32Values())
	if v, err = lr.values(col(ColLogprob), ColLogprob, 0); err != nil {
		return err
	}
	tb.Logprobs = view(v.(*array.Float32).Float32Values())
	if v, err = lr.values(col(ColLossMask), ColLossMask, 0); err != nil {
		return err
	}
	tb.LossMask = view(v.(*array.Uint8).Uint8Values())
	if v, err = lr.values(col(ColPolicyVersion), ColPolicyVersion, 0); err != nil {
		return err
	}
	tb.PolicyVersions = view(v.(*array.Int32).Int32Values())
	if tb.TokenRewards != nil {
		if v, err = lr.values(col(ColTokenReward), ColTokenReward, 0); err != nil {
			return err
		}
		// Non-nil even when empty: nil TokenRewards means "no such column".
		if tb.TokenRewards = view(v.(*array.Float32).Float32Values()); tb.TokenRewards == nil {
			tb.TokenRewards = []float32{}
		}
	}
	return nil
}

// readRoutes fills the routed-experts bytes when the batch has routes.
func (lr listReader) readRoutes(tb *TokenBatch, col func(string) arrow.Array) error {
	r := tb.Routes
	if r == nil {
		return nil
	}
	v, err := lr.values(col(ColRoutedExperts), ColRoutedExperts, r.Stride())
	if err != nil {
		return err
	}
	// The typed values are exactly the little-endian C-order bytes.
	switch a := v.(type) {
	case *array.Uint8:
		r.Data = view(a.Uint8Values())
	case *array.Int16:
		r.Data = view(arrow.Int16Traits.CastToBytes(a.Int16Values()))
	case *array.Int32:
		r.Data = view(arrow.Int32Traits.CastToBytes(a.Int32Values()))
	}
	return nil
}

// readSupport fills the sample support sets when the batch has them.
func (lr listReader) readSupport(tb *TokenBatch, col func(string) arrow.Array) error {
	s := tb.Support
	if s == nil {
		return nil
	}
	v, err := lr.values(col(ColSampleSupport), ColSampleSupport, int(s.K))
	if err != nil {
		return err
	}
	s.Values = view(v.(*array.Int32).Int32Values())
	return nil
}

// columnIndex maps each expected column name to its index in got. Columns
// are matched by name, so their order does not matter, and nullability flags
// and list child names are ignored (pyarrow marks fields nullable by default);
// nulls themselves are rejected later by noNulls. The type shapes must match
// exactly and there must be no extra column.
func columnIndex(got, want *arrow.Schema) (map[string]int, error) {
	if got.NumFields() != want.NumFields() {
		return nil, malformed("schema has %d columns %v, want %d %v", got.NumFields(), fieldNames(got), want.NumFields(), fieldNames(want))
	}
	index := make(map[string]int, want.NumFields())
	for _, f := range want.Fields() {
		idx := got.FieldIndices(f.Name)
		if len(idx) != 1 {
			return nil, malformed("schema has %d columns named %q, want 1", len(idx), f.Name)
		}
		if g := got.Field(idx[0]).Type; !sameShape(g, f.Type) {
			return nil, malformed("column %s has type %s, want %s", f.Name, g, f.Type)
		}
		index[f.Name] = idx[0]
	}
	return index, nil
}

func fieldNames(s *arrow.Schema) []string {
	out := make([]string, s.NumFields())
	for i, f := range s.Fields() {
		out[i] = f.Name
	}
	return out
}

// sameShape compares types ignoring nullability and child field names. The
// schema pre-check admits only ints, floats, utf8, list and fixed-size list,
// so for leaves the type id (which encodes width and signedness) suffices.
func sameShape(a, b arrow.DataType) bool {
	if a.ID() != b.ID() {
		return false
	}
	switch at := a.(type) {
	case *arrow.ListType:
		return sameShape(at.Elem(), b.(*arrow.ListType).Elem())
	case *arrow.FixedSizeListType:
		bt := b.(*arrow.FixedSizeListType)
		return at.Len() == bt.Len() && sameShape(at.Elem(), bt.Elem())
	}
	return true
}

func noNulls(d arrow.ArrayData) error {
	if d.NullN() != 0 {
		return fmt.Errorf("%d nulls in a non-nullable column", d.NullN())
	}
	for _, c := range d.Children() {
		if err := noNulls(c); err != nil {
			return err
		}
	}
	return nil
}

func copyStrings(a *array.String) []string {
	out := make([]string, a.Len())
	for i := range out {
		out[i] = strings.Clone(a.Value(i)) // Value aliases the IPC buffer
	}
	return out
}
