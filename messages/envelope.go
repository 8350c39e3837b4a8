package messages

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"reflect"
	"sync"

	"github.com/fxamacker/cbor/v2"
)

// Frame layout (big-endian, 9 bytes, then the payload):
//
//	offset 0  [2]byte  magic "AR"
//	offset 2  uint8    wire version (WireVersion)
//	offset 3  uint16   message type code (Kind)
//	offset 5  uint32   payload length in bytes
//	offset 9  payload  CBOR map with integer keys (RFC 8949)
const (
	// WireVersion is the frame version this build writes and the only one it reads.
	WireVersion uint8 = 1
	// FrameHeaderLen is the size of the fixed frame header.
	FrameHeaderLen = 9
	// DefaultMaxFrameBytes bounds a whole frame; bulk data belongs in a token
	// batch on a data plane, not in a control message.
	DefaultMaxFrameBytes = 8 << 20
)

// Magic is the first two bytes of every frame.
var Magic = [2]byte{'A', 'R'}

// CodecConfig bounds what a decoder accepts from the network.
type CodecConfig struct {
	// MaxFrameBytes is the largest frame (header+payload) encoded or decoded;
	// larger ones fail with ErrTooLarge. It also bounds every CBOR byte and
	// text string, which cannot exceed the frame. Must be > FrameHeaderLen.
	MaxFrameBytes int
	// MaxNestedLevels bounds CBOR nesting depth (4..65535).
	MaxNestedLevels int
	// MaxArrayElements bounds the length of any CBOR array (16..2147483647).
	MaxArrayElements int
	// MaxMapPairs bounds the size of any CBOR map (16..2147483647).
	MaxMapPairs int
}

// DefaultCodecConfig: 8 MiB frames, depth 16, 4M-element arrays (a 200k-token
// turn fits), 64k-pair maps.
func DefaultCodecConfig() CodecConfig {
	return CodecConfig{
		MaxFrameBytes:    DefaultMaxFrameBytes,
		MaxNestedLevels:  16,
		MaxArrayElements: 1 << 22,
		MaxMapPairs:      1 << 16,
	}
}

// Validate names the first bad field and its allowed range.
func (c CodecConfig) Validate() error {
	switch {
	case c.MaxFrameBytes <= FrameHeaderLen || uint64(c.MaxFrameBytes) > FrameHeaderLen+uint64(^uint32(0)):
		return fmt.Errorf("messages: CodecConfig.MaxFrameBytes=%d: want %d < n <= %d", c.MaxFrameBytes, FrameHeaderLen, FrameHeaderLen+uint64(^uint32(0)))
	case c.MaxNestedLevels < 4 || c.MaxNestedLevels > 65535:
		return fmt.Errorf("messages: CodecConfig.MaxNestedLevels=%d: want 4..65535", c.MaxNestedLevels)
	case c.MaxArrayElements < 16 || c.MaxArrayElements > 2147483647:
		return fmt.Errorf("messages: CodecConfig.MaxArrayElements=%d: want 16..2147483647", c.MaxArrayElements)
	case c.MaxMapPairs < 16 || c.MaxMapPairs > 2147483647:
		return fmt.Errorf("messages: CodecConfig.MaxMapPairs=%d: want 16..2147483647", c.MaxMapPairs)
	}
	return nil
}

// Codec encodes and decodes framed messages. It is immutable and safe for
// concurrent use.
type Codec struct {
	cfg CodecConfig
	em  cbor.UserBufferEncMode
	dm  cbor.DecMode
}

// NewCodec builds a codec; cfg must pass Validate.
func NewCodec(cfg CodecConfig) (*Codec, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Core deterministic encoding (sorted map keys, shortest integer forms)
	// makes encode(decode(x)) byte-stable, which golden files and fuzzing rely on.
	em, err := cbor.EncOptions{Sort: cbor.SortCoreDeterministic}.UserBufferEncMode()
	if err != nil {
		return nil, fmt.Errorf("messages: cbor enc mode: %w", err)
	}
	dm, err := cbor.DecOptions{
		// A duplicated key would make two decoders disagree on a value.
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		MaxNestedLevels:  cfg.MaxNestedLevels,
		MaxArrayElements: cfg.MaxArrayElements,
		MaxMapPairs:      cfg.MaxMapPairs,
		IndefLength:      cbor.IndefLengthForbidden,
		TagsMd:           cbor.TagsForbidden,
		UTF8:             cbor.UTF8RejectInvalid,
		// Unknown keys are ignored on purpose: a newer sender may add fields
		// (forward compatibility); this is why keys are never reused.
	}.DecMode()
	if err != nil {
		return nil, fmt.Errorf("messages: cbor dec mode: %w", err)
	}
	return &Codec{cfg: cfg, em: em, dm: dm}, nil
}

// Config returns the codec's limits.
func (c *Codec) Config() CodecConfig { return c.cfg }

var defaultCodec = func() *Codec {
	c, err := NewCodec(DefaultCodecConfig())
	if err != nil {
		panic(err)
	}
	return c
}()

// DefaultCodec is the codec with DefaultCodecConfig, used by Encode and Decode.
func DefaultCodec() *Codec { return defaultCodec }

// Encode frames m with the default codec.
func Encode(m Message) ([]byte, error) { return defaultCodec.Encode(m) }

// Decode parses a frame with the default codec.
func Decode(b []byte) (Message, error) { return defaultCodec.Decode(b) }

// DecodeAs decodes with the default codec and asserts the concrete type,
// e.g. DecodeAs[messages.GroupReady](data).
func DecodeAs[T Message](b []byte) (T, error) { return DecodeAsWith[T](defaultCodec, b) }

// DecodeAsWith is DecodeAs with an explicit codec. T may be the value type
// (as Decode returns) or a pointer to it.
func DecodeAsWith[T Message](c *Codec, b []byte) (T, error) {
	var zero T
	m, err := c.Decode(b)
	if err != nil {
		return zero, err
	}
	if t, ok := m.(T); ok {
		return t, nil
	}
	// Allow T = *X when the frame holds X.
	rt := reflect.TypeFor[T]()
	if rt.Kind() == reflect.Pointer && rt.Elem() == reflect.TypeOf(m) {
		p := reflect.New(rt.Elem())
		p.Elem().Set(reflect.ValueOf(m))
		return p.Interface().(T), nil
	}
	return zero, fmt.Errorf("%w: want %T, frame holds %s", ErrWrongKind, zero, m.Kind())
}

// Encode returns the frame for m (a message value or a non-nil pointer to one).
func (c *Codec) Encode(m Message) ([]byte, error) {
	if m == nil {
		return nil, fmt.Errorf("messages: encode: nil message")
	}
	rv := reflect.ValueOf(m)
	if rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil, fmt.Errorf("messages: encode %T: nil pointer", m)
		}
		rv = rv.Elem()
	}
	k := m.Kind()
	info, ok := registry[k]
	if !ok || info.typ != rv.Type() {
		// Only the registered struct for a code may be sent under it, or the
		// receiver would decode a different shape.
		return nil, fmt.Errorf("%w: encode %T as %s", ErrUnknownType, m, k)
	}
	// The payload is encoded after a blank header in a pooled buffer, and
	// the frame copied out once: one allocation per frame. m is marshalled
	// as given (a pointer encodes as the value it points to).
	buf := frameBufs.Get().(*bytes.Buffer)
	defer putFrameBuf(buf)
	buf.Reset()
	buf.Write(make([]byte, FrameHeaderLen))
	if err := c.em.MarshalToBuffer(m, buf); err != nil {
		return nil, fmt.Errorf("messages: encode %s: %w", info.name, err)
	}
	n := buf.Len()
	if n > c.cfg.MaxFrameBytes {
		return nil, fmt.Errorf("%w: encode %s: frame %d bytes > limit %d", ErrTooLarge, info.name, n, c.cfg.MaxFrameBytes)
	}
	out := make([]byte, n)
	copy(out, buf.Bytes())
	putHeader(out, k, n-FrameHeaderLen)
	return out, nil
}

// frameBufs holds the buffers Encode marshals into; buffers that grew past
// maxPooledFrameBuf (a bulk frame) are left to the collector.
var frameBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledFrameBuf = 64 << 10

func putFrameBuf(b *bytes.Buffer) {
	if b.Cap() <= maxPooledFrameBuf {
		frameBufs.Put(b)
	}
}

func putHeader(out []byte, k Kind, n int) {
	out[0], out[1] = Magic[0], Magic[1]
	out[2] = WireVersion
	binary.BigEndian.PutUint16(out[3:5], uint16(k))
	binary.BigEndian.PutUint32(out[5:9], uint32(n))
}

// PeekKind reads only the frame header: routing a frame needs no payload decode.
// It checks magic, version and registry but not the payload.
func (c *Codec) PeekKind(b []byte) (Kind, error) {
	k, _, err := c.header(b)
	return k, err
}

// header validates the fixed header and returns the kind and payload length.
func (c *Codec) header(b []byte) (Kind, int, error) {
	if len(b) < FrameHeaderLen {
		// A prefix of the magic is still a truncated frame, anything else is foreign.
		for i := 0; i < len(b) && i < 2; i++ {
			if b[i] != Magic[i] {
				return 0, 0, fmt.Errorf("%w: got %#x", ErrBadMagic, b[:min(len(b), 2)])
			}
		}
		return 0, 0, fmt.Errorf("%w: %d bytes < %d-byte frame header", ErrTruncated, len(b), FrameHeaderLen)
	}
	if b[0] != Magic[0] || b[1] != Magic[1] {
		return 0, 0, fmt.Errorf("%w: got %#x", ErrBadMagic, b[:2])
	}
	if b[2] != WireVersion {
		return 0, 0, fmt.Errorf("%w: %d (this build speaks %d)", ErrUnknownVersion, b[2], WireVersion)
	}
	k := Kind(binary.BigEndian.Uint16(b[3:5]))
	if !k.Known() {
		return 0, 0, fmt.Errorf("%w: code 0x%04x", ErrUnknownType, uint16(k))
	}
	n := uint64(binary.BigEndian.Uint32(b[5:9]))
	if FrameHeaderLen+n > uint64(c.cfg.MaxFrameBytes) {
		return 0, 0, fmt.Errorf("%w: %s frame %d bytes > limit %d", ErrTooLarge, k, FrameHeaderLen+n, c.cfg.MaxFrameBytes)
	}
	return k, int(n), nil
}

// Decode parses one frame. Every failure wraps one of the package's sentinel
// errors; no input makes it panic.
func (c *Codec) Decode(b []byte) (Message, error) {
	k, n, err := c.header(b)
	if err != nil {
		return nil, err
	}
	info := registry[k]
	rest := len(b) - FrameHeaderLen
	if rest < n {
		return nil, fmt.Errorf("%w: decode %s: payload %d of %d bytes", ErrTruncated, info.name, rest, n)
	}
	if rest > n {
		return nil, fmt.Errorf("%w: decode %s: %d trailing bytes after payload", ErrMalformed, info.name, rest-n)
	}
	m, err := info.decode(c.dm, b[FrameHeaderLen:])
	if err != nil {
		return nil, fmt.Errorf("%w: decode %s: %v", ErrMalformed, info.name, err)
	}
	return m, nil
}
