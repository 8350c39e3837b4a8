package messages

import (
	"encoding/binary"
	"fmt"
)

// Arrow's IPC reader sizes slices from vector lengths in the schema message's
// flatbuffer without checking them against the buffer, so a few hostile bytes
// can demand terabytes and kill the process (a fatal runtime error, which no
// recover catches). checkSchemaMessage walks the schema message first and
// rejects any offset or vector length that does not fit, any type outside the
// token-batch schema's vocabulary, and implausible counts. Record-batch
// messages are not pre-walked: the reader indexes them lazily (an out-of-range
// index panics, which DecodeTokenBatch recovers) and their buffers go through
// the budget allocator.

// Flatbuffer Type union codes (Arrow Schema.fbs) the token-batch schema uses.
const (
	fbTypeInt           = 2
	fbTypeFloatingPoint = 3
	fbTypeUtf8          = 5
	fbTypeList          = 12
	fbTypeFixedSizeList = 16
	fbHeaderSchema      = 1
)

// Bounds far above the real schema (≤ 11 fields, nesting 2, ≤ 8 metadata keys).
const (
	fbMaxFields   = 64
	fbMaxChildren = 4
	fbMaxDepth    = 4
	fbMaxKV       = 64
)

type fbuf []byte

var errFB = fmt.Errorf("%w: token batch: bad schema flatbuffer", ErrMalformed)

func (b fbuf) u32(p int) (int, error) {
	if p < 0 || p+4 > len(b) {
		return 0, fmt.Errorf("%w: offset %d outside %d bytes", errFB, p, len(b))
	}
	return int(binary.LittleEndian.Uint32(b[p:])), nil
}

func (b fbuf) u16(p int) (int, error) {
	if p < 0 || p+2 > len(b) {
		return 0, fmt.Errorf("%w: offset %d outside %d bytes", errFB, p, len(b))
	}
	return int(binary.LittleEndian.Uint16(b[p:])), nil
}

type fbTable struct {
	b      fbuf
	pos    int
	vt     int
	vtSize int
	size   int
}

// Positions are computed exactly as the flatbuffers runtime computes them
// (uint32 arithmetic that wraps, a field present iff its vtable slot offset
// < vtable size), so the walk checks the very bytes Arrow will read.

func (b fbuf) table(p int) (fbTable, error) {
	so, err := b.u32(p)
	if err != nil {
		return fbTable{}, err
	}
	vt := int(uint32(int32(p) - int32(uint32(so))))
	vtSize, err := b.u16(vt)
	if err != nil {
		return fbTable{}, err
	}
	size, err := b.u16(vt + 2)
	if err != nil {
		return fbTable{}, err
	}
	if vtSize < 4 || vt+vtSize > len(b) || p+size > len(b) {
		return fbTable{}, fmt.Errorf("%w: table at %d out of bounds", errFB, p)
	}
	return fbTable{b: b, pos: p, vt: vt, vtSize: vtSize, size: size}, nil
}

// field returns the absolute position of field id, or 0 when absent.
func (t fbTable) field(id int) (int, error) {
	o := 4 + 2*id
	if o >= t.vtSize {
		return 0, nil
	}
	off, err := t.b.u16(t.vt + o)
	if err != nil || off == 0 {
		return 0, err
	}
	if off >= t.size {
		return 0, fmt.Errorf("%w: field %d beyond table size", errFB, id)
	}
	return t.pos + off, nil
}

// indirect follows the uoffset stored at p, wrapping like the runtime.
func (b fbuf) indirect(p int) (int, error) {
	u, err := b.u32(p)
	if err != nil {
		return 0, err
	}
	q := int(uint32(p) + uint32(u))
	if q >= len(b) {
		return 0, fmt.Errorf("%w: offset at %d points outside the buffer", errFB, p)
	}
	return q, nil
}

// ref follows the uoffset stored in field id; 0 when absent.
func (t fbTable) ref(id int) (int, error) {
	p, err := t.field(id)
	if err != nil || p == 0 {
		return 0, err
	}
	return t.b.indirect(p)
}

func (t fbTable) u8(id int) (int, error) {
	p, err := t.field(id)
	if err != nil || p == 0 {
		return 0, err
	}
	if p >= len(t.b) {
		return 0, errFB
	}
	return int(t.b[p]), nil
}

// vector checks a vector header at p and returns its length and first element.
func (b fbuf) vector(p, elem, maxN int) (int, int, error) {
	n, err := b.u32(p)
	if err != nil {
		return 0, 0, err
	}
	if n > maxN || int64(p)+4+int64(n)*int64(elem) > int64(len(b)) {
		return 0, 0, fmt.Errorf("%w: vector of %d×%d bytes at %d (max %d elements, %d bytes buffer)", errFB, n, elem, p, maxN, len(b))
	}
	return n, p + 4, nil
}

// tables checks a vector of table offsets at p and calls f on each table.
func (b fbuf) tables(p, maxN int, f func(fbTable) error) error {
	if p == 0 {
		return nil
	}
	n, start, err := b.vector(p, 4, maxN)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		q, err := b.indirect(start + 4*i)
		if err != nil {
			return err
		}
		t, err := b.table(q)
		if err != nil {
			return err
		}
		if err := f(t); err != nil {
			return err
		}
	}
	return nil
}

func (b fbuf) str(p int) error {
	if p == 0 {
		return nil
	}
	_, _, err := b.vector(p, 1, len(b))
	return err
}

func checkKVs(t fbTable, id int) error {
	p, err := t.ref(id)
	if err != nil {
		return err
	}
	return t.b.tables(p, fbMaxKV, func(kv fbTable) error {
		for id := 0; id < 2; id++ {
			s, err := kv.ref(id)
			if err != nil {
				return err
			}
			if err := kv.b.str(s); err != nil {
				return err
			}
		}
		return nil
	})
}

func checkField(f fbTable, depth int) error {
	if depth > fbMaxDepth {
		return fmt.Errorf("%w: fields nested deeper than %d", errFB, fbMaxDepth)
	}
	name, err := f.ref(0)
	if err != nil {
		return err
	}
	if err := f.b.str(name); err != nil {
		return err
	}
	tt, err := f.u8(2)
	if err != nil {
		return err
	}
	switch tt {
	case fbTypeInt, fbTypeFloatingPoint, fbTypeUtf8, fbTypeList, fbTypeFixedSizeList:
	default:
		return fmt.Errorf("%w: field type code %d not used by the token batch schema", errFB, tt)
	}
	tp, err := f.ref(3)
	if err != nil {
		return err
	}
	if tp == 0 {
		return fmt.Errorf("%w: field without type table", errFB)
	}
	if _, err := f.b.table(tp); err != nil {
		return err
	}
	if d, err := f.ref(4); err != nil || d != 0 {
		return fmt.Errorf("%w: dictionary-encoded field", errFB)
	}
	children, err := f.ref(5)
	if err != nil {
		return err
	}
	if err := f.b.tables(children, fbMaxChildren, func(c fbTable) error { return checkField(c, depth+1) }); err != nil {
		return err
	}
	return checkKVs(f, 6)
}

// checkSchemaMessage verifies the first message of an IPC stream.
func checkSchemaMessage(data []byte) error {
	p := 0
	n, err := fbuf(data).u32(0)
	if err != nil {
		return err
	}
	if n == 0xFFFFFFFF { // continuation marker, then the length
		if n, err = fbuf(data).u32(4); err != nil {
			return err
		}
		p = 8
	}
	if n < 4 || p+n > len(data) {
		return fmt.Errorf("%w: schema message length %d", errFB, n)
	}
	b := fbuf(data[p : p+n])
	root, err := b.indirect(0)
	if err != nil {
		return err
	}
	msg, err := b.table(root)
	if err != nil {
		return err
	}
	ht, err := msg.u8(1)
	if err != nil {
		return err
	}
	if ht != fbHeaderSchema {
		return fmt.Errorf("%w: first message has header type %d, want a schema", errFB, ht)
	}
	if err := checkKVs(msg, 4); err != nil {
		return err
	}
	sp, err := msg.ref(2)
	if err != nil || sp == 0 {
		return fmt.Errorf("%w: schema message without schema", errFB)
	}
	schema, err := b.table(sp)
	if err != nil {
		return err
	}
	fields, err := schema.ref(1)
	if err != nil {
		return err
	}
	if err := b.tables(fields, fbMaxFields, func(f fbTable) error { return checkField(f, 0) }); err != nil {
		return err
	}
	if feat, err := schema.ref(3); err != nil {
		return err
	} else if feat != 0 {
		if _, _, err := b.vector(feat, 8, 64); err != nil {
			return err
		}
	}
	return checkKVs(schema, 2)
}
