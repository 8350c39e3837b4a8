package data

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Column names a shard may hold.
const (
	ColInputIDs = "input_ids" // list<int32|int64|uint16|uint32>, required
	ColLossMask = "loss_mask" // list<uint8|int8|bool>, optional: 1 = a training target
	ColLabels   = "labels"    // list<int32|int64>, optional: -100 = not a target (HF convention)
)

// IgnoreLabel is the labels value that marks a token as no target.
const IgnoreLabel = -100

// idsKind is how a shard stores token ids.
type idsKind uint8

const (
	idsInt32 idsKind = iota + 1
	idsInt64
	idsUint16
	idsUint32
)

func (k idsKind) String() string {
	return [...]string{"", "int32", "int64", "uint16", "uint32"}[k]
}

type maskKind uint8

const (
	maskNone maskKind = iota
	maskUint8
	maskInt8
	maskBool
	labelsInt32
	labelsInt64
)

// layout is where the columns of a shard's schema are and how they are typed.
type layout struct {
	ids      int
	idsKind  idsKind
	mask     int // -1: none
	maskKind maskKind
}

func listElem(f arrow.Field) (arrow.DataType, bool) {
	l, ok := f.Type.(*arrow.ListType)
	if !ok {
		return nil, false
	}
	return l.Elem(), true
}

// schemaLayout checks a schema: input_ids must be a list of integers; a
// loss_mask or labels column, if present, a list of the allowed types.
func schemaLayout(s *arrow.Schema) (layout, error) {
	lay := layout{ids: -1, mask: -1}
	idx := s.FieldIndices(ColInputIDs)
	if len(idx) == 0 {
		return lay, fmt.Errorf("no %s column (columns: %v)", ColInputIDs, fieldNames(s))
	}
	lay.ids = idx[0]
	f := s.Field(lay.ids)
	elem, ok := listElem(f)
	switch {
	case !ok:
	case elem.ID() == arrow.INT32:
		lay.idsKind = idsInt32
	case elem.ID() == arrow.INT64:
		lay.idsKind = idsInt64
	case elem.ID() == arrow.UINT16:
		lay.idsKind = idsUint16
	case elem.ID() == arrow.UINT32:
		lay.idsKind = idsUint32
	}
	if lay.idsKind == 0 {
		return lay, fmt.Errorf("column %s has type %s: want list<int32|int64|uint16|uint32>", ColInputIDs, f.Type)
	}
	if idx := s.FieldIndices(ColLossMask); len(idx) > 0 {
		f := s.Field(idx[0])
		elem, ok := listElem(f)
		switch {
		case !ok:
		case elem.ID() == arrow.UINT8:
			lay.maskKind = maskUint8
		case elem.ID() == arrow.INT8:
			lay.maskKind = maskInt8
		case elem.ID() == arrow.BOOL:
			lay.maskKind = maskBool
		}
		if lay.maskKind == maskNone {
			return lay, fmt.Errorf("column %s has type %s: want list<uint8|int8|bool>", ColLossMask, f.Type)
		}
		lay.mask = idx[0]
	} else if idx := s.FieldIndices(ColLabels); len(idx) > 0 {
		f := s.Field(idx[0])
		elem, ok := listElem(f)
		switch {
		case !ok:
		case elem.ID() == arrow.INT32:
			lay.maskKind = labelsInt32
		case elem.ID() == arrow.INT64:
			lay.maskKind = labelsInt64
		}
		if lay.maskKind == maskNone {
			return lay, fmt.Errorf("column %s has type %s: want list<int32|int64>", ColLabels, f.Type)
		}
		lay.mask = idx[0]
	}
	return lay, nil
}

func fieldNames(s *arrow.Schema) []string {
	var out []string
	for _, f := range s.Fields() {
		out = append(out, f.Name)
	}
	return out
}

// batch is one record batch's columns as raw slices (for Arrow IPC shards
// these point into the memory-mapped file).
type batch struct {
	rec   arrow.RecordBatch
	ids   *array.List
	offs  []int32
	i32   []int32
	i64   []int64
	u16   []uint16
	u32   []uint32
	kind  idsKind
	mask  *array.List
	moffs []int32
	mu8   []uint8
	mi8   []int8
	mbool *array.Boolean
	li32  []int32
	li64  []int64
	mkind maskKind
	// idsNulls, maskNulls: the column has nulls (else IsNull is skipped)
	idsNulls, maskNulls bool
}

func newBatch(rec arrow.RecordBatch, lay layout) batch {
	b := batch{rec: rec, kind: lay.idsKind, mkind: lay.maskKind}
	b.ids = rec.Column(lay.ids).(*array.List)
	b.offs = b.ids.Offsets()
	b.idsNulls = b.ids.NullN() > 0
	switch v := b.ids.ListValues().(type) {
	case *array.Int32:
		b.i32 = v.Int32Values()
	case *array.Int64:
		b.i64 = v.Int64Values()
	case *array.Uint16:
		b.u16 = v.Uint16Values()
	case *array.Uint32:
		b.u32 = v.Uint32Values()
	}
	if lay.mask >= 0 {
		b.mask = rec.Column(lay.mask).(*array.List)
		b.moffs = b.mask.Offsets()
		b.maskNulls = b.mask.NullN() > 0
		switch v := b.mask.ListValues().(type) {
		case *array.Uint8:
			b.mu8 = v.Uint8Values()
		case *array.Int8:
			b.mi8 = v.Int8Values()
		case *array.Boolean:
			b.mbool = v
		case *array.Int32:
			b.li32 = v.Int32Values()
		case *array.Int64:
			b.li64 = v.Int64Values()
		}
	}
	return b
}

func (b *batch) valuesLen() int {
	switch b.kind {
	case idsInt32:
		return len(b.i32)
	case idsInt64:
		return len(b.i64)
	case idsUint16:
		return len(b.u16)
	default:
		return len(b.u32)
	}
}

// checkOffsets verifies that row i's offsets are in order and inside the
// values: a corrupt shard fails here, not with a panic later.
func (b *batch) checkOffsets(i int) error {
	if b.idsNulls && b.ids.IsNull(i) {
		return fmt.Errorf("%s is null", ColInputIDs)
	}
	lo, hi := b.offs[i], b.offs[i+1]
	if lo < 0 || hi < lo || int(hi) > b.valuesLen() {
		return fmt.Errorf("%s offsets [%d, %d) outside the %d values", ColInputIDs, lo, hi, b.valuesLen())
	}
	if b.mask != nil && !(b.maskNulls && b.mask.IsNull(i)) {
		mlo, mhi := b.moffs[i], b.moffs[i+1]
		n := 0
		switch b.mkind {
		case maskUint8:
			n = len(b.mu8)
		case maskInt8:
			n = len(b.mi8)
		case maskBool:
			n = b.mbool.Len()
		case labelsInt32:
			n = len(b.li32)
		case labelsInt64:
			n = len(b.li64)
		}
		if mlo < 0 || mhi < mlo || int(mhi) > n {
			return fmt.Errorf("%s offsets [%d, %d) outside the %d values", b.maskName(), mlo, mhi, n)
		}
	}
	return nil
}

func (b *batch) maskName() string {
	if b.mkind == labelsInt32 || b.mkind == labelsInt64 {
		return ColLabels
	}
	return ColLossMask
}

func (b *batch) rowLen(i int) int { return int(b.offs[i+1] - b.offs[i]) }

// appendIDs appends row i's ids to dst as int32 and returns the largest
// id seen (for the vocabulary check) and the smallest.
func (b *batch) appendIDs(dst []int32, i int) ([]int32, int64, int64) {
	lo, hi := b.offs[i], b.offs[i+1]
	minID, maxID := int64(0), int64(-1)
	if hi > lo {
		minID, maxID = int64(1)<<62, int64(-1)<<62
	}
	switch b.kind {
	case idsUint16:
		// convert into place (no append per value); four running maxima
		// keep the loop free of a serial dependency
		src := b.u16[lo:hi]
		n0 := len(dst)
		dst = slices.Grow(dst, len(src))[:n0+len(src)]
		out := dst[n0:]
		out = out[:len(src)]
		var m0, m1, m2, m3 uint16
		j := 0
		for ; j+4 <= len(src); j += 4 {
			s, o := src[j:j+4:j+4], out[j:j+4:j+4]
			o[0], o[1], o[2], o[3] = int32(s[0]), int32(s[1]), int32(s[2]), int32(s[3])
			m0, m1, m2, m3 = max(m0, s[0]), max(m1, s[1]), max(m2, s[2]), max(m3, s[3])
		}
		for ; j < len(src); j++ {
			out[j] = int32(src[j])
			m0 = max(m0, src[j])
		}
		mx := max(m0, m1, m2, m3)
		if hi > lo {
			minID, maxID = 0, int64(mx)
		}
	case idsInt32:
		src := b.i32[lo:hi]
		dst = append(dst, src...)
		for _, v := range src {
			minID, maxID = min(minID, int64(v)), max(maxID, int64(v))
		}
	case idsUint32:
		for _, v := range b.u32[lo:hi] {
			dst = append(dst, int32(v))
			minID, maxID = min(minID, int64(v)), max(maxID, int64(v))
		}
	case idsInt64:
		for _, v := range b.i64[lo:hi] {
			dst = append(dst, int32(v))
			minID, maxID = min(minID, v), max(maxID, v)
		}
	}
	return dst, minID, maxID
}

// maskLen is the length of row i's mask (-1: no mask for this row).
func (b *batch) maskLen(i int) int {
	if b.mask == nil || (b.maskNulls && b.mask.IsNull(i)) {
		return -1
	}
	return int(b.moffs[i+1] - b.moffs[i])
}

// appendMask appends row i's mask as 0/1 (labels: 1 where label ≠ -100);
// bad reports the first value that is neither 0 nor 1 in a loss_mask.
func (b *batch) appendMask(dst []uint8, i int) (out []uint8, bad int) {
	lo, hi := int(b.moffs[i]), int(b.moffs[i+1])
	bad = -1
	for j := lo; j < hi; j++ {
		var m uint8
		switch b.mkind {
		case maskUint8:
			m = b.mu8[j]
		case maskInt8:
			m = uint8(b.mi8[j])
		case maskBool:
			if b.mbool.Value(j) {
				m = 1
			}
		case labelsInt32:
			if b.li32[j] != IgnoreLabel {
				m = 1
			}
		case labelsInt64:
			if b.li64[j] != IgnoreLabel {
				m = 1
			}
		}
		if m > 1 && bad < 0 {
			bad = j - lo
		}
		dst = append(dst, m)
	}
	return dst, bad
}

// fileOffset is where in mapping the slice data at p starts (-1: not in it).
func fileOffset(mapping []byte, p unsafe.Pointer) int64 {
	if len(mapping) == 0 || p == nil {
		return -1
	}
	m0 := uintptr(unsafe.Pointer(unsafe.SliceData(mapping)))
	if uintptr(p) < m0 || uintptr(p) >= m0+uintptr(len(mapping)) {
		return -1
	}
	return int64(uintptr(p) - m0)
}

// filePlan says where a mapped batch's buffers lie in its file, so rows
// can be read with pread instead of through the mapping (see readRow).
type filePlan struct {
	offs, vals   int64 // file offsets of the ids' offsets and values (-1: not mapped)
	width        int   // bytes per id
	moffs, mvals int64 // the loss_mask's (uint8 only; -1: none or not mapped)
}

func (b *batch) plan(mapping []byte) filePlan {
	p := filePlan{offs: -1, vals: -1, moffs: -1, mvals: -1}
	if b.idsNulls || len(b.offs) == 0 {
		return p
	}
	switch b.kind {
	case idsUint16:
		p.vals, p.width = fileOffset(mapping, unsafe.Pointer(unsafe.SliceData(b.u16))), 2
	case idsInt32:
		p.vals, p.width = fileOffset(mapping, unsafe.Pointer(unsafe.SliceData(b.i32))), 4
	default:
		return p // uint32/int64 ids are read through the mapping
	}
	if p.vals < 0 && b.valuesLen() > 0 {
		return filePlan{offs: -1, vals: -1, moffs: -1, mvals: -1}
	}
	p.offs = fileOffset(mapping, unsafe.Pointer(unsafe.SliceData(b.offs)))
	if b.mask != nil && b.mu8 != nil && !b.maskNulls && len(b.moffs) > 0 {
		p.moffs = fileOffset(mapping, unsafe.Pointer(unsafe.SliceData(b.moffs)))
		p.mvals = fileOffset(mapping, unsafe.Pointer(unsafe.SliceData(b.mu8)))
	}
	return p
}
