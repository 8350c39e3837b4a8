package messages

import (
	"encoding/binary"
	"fmt"
)

// Arrow's IPC reader sizes slices from vector lengths in a message's
// flatbuffer without checking them against the buffer, so a few hostile bytes
// can demand terabytes and kill the process (a fatal runtime error, which no
// recover catches). checkStream walks every message Arrow will parse — the
// schema and the record batches, whose custom metadata is sized the same way —
// and rejects any offset or vector length that does not fit, any type outside
// the token-batch schema's vocabulary, and implausible counts. Buffers then go
// through the budget allocator, and an out-of-range index into them panics,
// which DecodeTokenBatch recovers.

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

// Message header union codes (Arrow Message.fbs).
const (
	fbHeaderRecordBatch = 3
	// fbMaxMessages: schema, one record batch, and one more that the decoder
	// reads to prove there is no second batch.
	fbMaxMessages = 3
)

// checkStream walks the framing of an IPC stream exactly as arrow-go's
// message reader does and verifies the flatbuffer of every message it would
// parse: the schema first, then record batches only (dictionary batches,
// tensors and anything else are refused). A truncated tail is left for Arrow
// to report.
func checkStream(data []byte) error {
	d := fbuf(data)
	pos := 0
	for i := 0; ; i++ {
		if pos+4 > len(data) {
			return nil
		}
		n, _ := d.u32(pos)
		pos += 4
		if n == 0xFFFFFFFF {
			if pos+4 > len(data) {
				return nil
			}
			n, _ = d.u32(pos)
			pos += 4
		}
		if n == 0 {
			return nil // end-of-stream marker
		}
		if i == fbMaxMessages {
			return fmt.Errorf("%w: more than %d messages", errFB, fbMaxMessages)
		}
		if n < 4 || n > len(data)-pos {
			return nil // Arrow rejects the length or hits EOF
		}
		body, err := checkMessage(fbuf(data[pos:pos+n]), i == 0)
		if err != nil {
			return err
		}
		pos += n
		if body > int64(len(data)-pos) {
			return nil // Arrow's body size limit or EOF reports it
		}
		pos += int(body)
	}
}

// checkMessage verifies one message's flatbuffer and returns its body length.
func checkMessage(b fbuf, first bool) (int64, error) {
	root, err := b.indirect(0)
	if err != nil {
		return 0, err
	}
	msg, err := b.table(root)
	if err != nil {
		return 0, err
	}
	ht, err := msg.u8(1)
	if err != nil {
		return 0, err
	}
	if want := map[bool]int{true: fbHeaderSchema, false: fbHeaderRecordBatch}[first]; ht != want {
		return 0, fmt.Errorf("%w: message has header type %d, want %d", errFB, ht, want)
	}
	if err := checkKVs(msg, 4); err != nil {
		return 0, err
	}
	body, err := messageBodyLen(b, msg)
	if err != nil {
		return 0, err
	}
	hp, err := msg.ref(2)
	if err != nil || hp == 0 {
		return 0, fmt.Errorf("%w: message without header", errFB)
	}
	h, err := b.table(hp)
	if err != nil {
		return 0, err
	}
	if first {
		return body, checkSchema(h)
	}
	return body, checkRecordBatch(b, h)
}

// messageBodyLen reads a message's optional bodyLength field (0 when absent).
func messageBodyLen(b fbuf, msg fbTable) (int64, error) {
	p, err := msg.field(3)
	if err != nil || p == 0 {
		return 0, err
	}
	if p+8 > len(b) {
		return 0, errFB
	}
	body := int64(binary.LittleEndian.Uint64(b[p:]))
	if body < 0 {
		return 0, fmt.Errorf("%w: negative body length", errFB)
	}
	return body, nil
}

// checkRecordBatch verifies a RecordBatch header: nodes and buffers are
// vectors of 16-byte structs, variadicBufferCounts of int64; compression is
// a small table.
func checkRecordBatch(b fbuf, h fbTable) error {
	for _, v := range []struct{ id, elem int }{{1, 16}, {2, 16}, {4, 8}} {
		p, err := h.ref(v.id)
		if err != nil {
			return err
		}
		if p != 0 {
			if _, _, err := b.vector(p, v.elem, len(b)); err != nil {
				return err
			}
		}
	}
	if p, err := h.ref(3); err != nil {
		return err
	} else if p != 0 {
		if _, err := b.table(p); err != nil {
			return err
		}
	}
	return nil
}

func checkSchema(schema fbTable) error {
	b := schema.b
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
