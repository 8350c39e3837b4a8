package messages

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func mustEncode(t testing.TB, m Message) []byte {
	t.Helper()
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestWireGolden freezes the bytes of every sample: renumbering a key or a
// kind code, or changing the frame layout, breaks it (that is the point —
// such a change would break every deployed peer).
func TestWireGolden(t *testing.T) {
	var sb strings.Builder
	for _, m := range samples() {
		sb.WriteString(m.Kind().String())
		sb.WriteByte(' ')
		sb.WriteString(hex.EncodeToString(mustEncode(t, m)))
		sb.WriteByte('\n')
	}
	golden(t, "wire.golden", sb.String())
}

func TestFrameHeaderLayout(t *testing.T) {
	b := mustEncode(t, MinVersionSet{MinVersion: 7})
	if b[0] != 'A' || b[1] != 'R' || b[2] != 1 {
		t.Fatalf("magic/version bytes %x", b[:3])
	}
	if k := binary.BigEndian.Uint16(b[3:5]); Kind(k) != KindMinVersionSet {
		t.Fatalf("type code %#x", k)
	}
	if n := binary.BigEndian.Uint32(b[5:9]); int(n) != len(b)-FrameHeaderLen {
		t.Fatalf("length %d for %d payload bytes", n, len(b)-FrameHeaderLen)
	}
	// {10: 7} as a CBOR map: a1 0a 07.
	if got := hex.EncodeToString(b[FrameHeaderLen:]); got != "a10a07" {
		t.Fatalf("payload %s, want a10a07", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := mustEncode(t, samples()[0])
	mod := func(f func(b []byte) []byte) []byte {
		c := append([]byte(nil), good...)
		return f(c)
	}
	small, err := NewCodec(CodecConfig{MaxFrameBytes: 32, MaxNestedLevels: 16, MaxArrayElements: 16, MaxMapPairs: 16})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		codec *Codec
		in    []byte
		want  error
	}{
		{"empty", nil, nil, ErrTruncated},
		{"header prefix", nil, good[:5], ErrTruncated},
		{"truncated payload", nil, good[:len(good)-1], ErrTruncated},
		{"header only", nil, good[:FrameHeaderLen], ErrTruncated},
		{"flipped magic", nil, mod(func(b []byte) []byte { b[0] ^= 0xff; return b }), ErrBadMagic},
		{"short foreign", nil, []byte("{}"), ErrBadMagic},
		{"json", nil, []byte(`{"run_id":"x","sender":"y"}`), ErrBadMagic},
		{"bumped version", nil, mod(func(b []byte) []byte { b[2]++; return b }), ErrUnknownVersion},
		{"version 0", nil, mod(func(b []byte) []byte { b[2] = 0; return b }), ErrUnknownVersion},
		{"unknown type", nil, mod(func(b []byte) []byte { binary.BigEndian.PutUint16(b[3:5], 0x7fff); return b }), ErrUnknownType},
		{"type zero", nil, mod(func(b []byte) []byte { binary.BigEndian.PutUint16(b[3:5], 0); return b }), ErrUnknownType},
		{"declared length over default limit", nil, mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[5:9], 1<<30); return b }), ErrTooLarge},
		{"frame over small limit", small, good, ErrTooLarge},
		{"trailing bytes", nil, append(append([]byte(nil), good...), 0), ErrMalformed},
		{"garbage cbor", nil, frame(KindGroupAccepted, []byte{0xff, 0xfe, 0xfd}), ErrMalformed},
		{"cbor not a map", nil, frame(KindGroupAccepted, []byte{0x05}), ErrMalformed},
		{"wrong field type", nil, frame(KindGroupAccepted, []byte{0xa1, 0x0a, 0x05}), ErrMalformed}, // {10: 5}, GroupID is a string
		{"duplicate key", nil, frame(KindMinVersionSet, []byte{0xa2, 0x0a, 0x01, 0x0a, 0x02}), ErrMalformed},
		{"indefinite length", nil, frame(KindGroupAccepted, []byte{0xbf, 0x0a, 0x61, 'g', 0xff}), ErrMalformed},
		{"invalid utf8", nil, frame(KindGroupAccepted, []byte{0xa1, 0x0a, 0x61, 0xff}), ErrMalformed},
		{"array over limit", small, frame(KindGroupReady, append([]byte{0xa1, 0x0c, 0x91}, []byte(strings.Repeat("\x60", 17))...)), ErrMalformed},
		{"negative into int32", nil, frame(KindPromptAssigned, []byte{0xa1, 0x0f, 0x3b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.codec
			if c == nil {
				c = DefaultCodec()
			}
			m, err := c.Decode(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode = %v, %v; want %v", m, err, tc.want)
			}
			if m != nil {
				t.Fatalf("message %v returned with error", m)
			}
			if !strings.HasPrefix(err.Error(), "messages: ") {
				t.Fatalf("error lacks package prefix: %v", err)
			}
		})
	}
}

func frame(k Kind, payload []byte) []byte {
	b := make([]byte, FrameHeaderLen, FrameHeaderLen+len(payload))
	putHeader(b, k, len(payload))
	return append(b, payload...)
}

func TestEncodeErrors(t *testing.T) {
	small, err := NewCodec(CodecConfig{MaxFrameBytes: 32, MaxNestedLevels: 16, MaxArrayElements: 16, MaxMapPairs: 16})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.Encode(PromptAssigned{Text: strings.Repeat("x", 100)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized encode: %v", err)
	}
	if _, err := Encode(nil); err == nil {
		t.Fatal("nil message encoded")
	}
	var p *GroupReady
	if _, err := Encode(p); err == nil {
		t.Fatal("nil pointer encoded")
	}
	if _, err := Encode(impostor{}); !errors.Is(err, ErrUnknownType) {
		t.Fatalf("foreign type under a registered code: %v", err)
	}
	if m, err := small.Decode(mustEncode(t, MinVersionSet{MinVersion: 1})); err != nil || m.(MinVersionSet).MinVersion != 1 {
		t.Fatalf("small codec decodes small frames: %v, %v", m, err)
	}
}

// impostor claims a registered code with a different shape.
type impostor struct{ Header }

func (impostor) Kind() Kind     { return KindGroupReady }
func (impostor) String() string { return "impostor" }

func TestCodecConfigValidate(t *testing.T) {
	if err := DefaultCodecConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		f     func(*CodecConfig)
	}{
		{"MaxFrameBytes", func(c *CodecConfig) { c.MaxFrameBytes = FrameHeaderLen }},
		{"MaxNestedLevels", func(c *CodecConfig) { c.MaxNestedLevels = 1 }},
		{"MaxArrayElements", func(c *CodecConfig) { c.MaxArrayElements = 0 }},
		{"MaxMapPairs", func(c *CodecConfig) { c.MaxMapPairs = -1 }},
	} {
		c := DefaultCodecConfig()
		tc.f(&c)
		if _, err := NewCodec(c); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: NewCodec error %v does not name the field", tc.field, err)
		}
	}
}

// TestDecodePythonFrame decodes a frame built by a Python worker with cbor2
// (non-canonical float64 encoding, keys in insertion order):
//
//	p = cbor2.dumps({1: 'r', 3: 2, 10: 't', 14: [-0.1, 1.5], 16: 7, 13: [1, 2]})
//	frame = b'AR' + bytes([1]) + struct.pack('>HI', 0x103, len(p)) + p
func TestDecodePythonFrame(t *testing.T) {
	b, err := hex.DecodeString("415201010300000023a601617203020a61740e82fbbfb999999999999afb3ff800000000000010070d820102")
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodeAs[TurnResult](b)
	if err != nil {
		t.Fatal(err)
	}
	want := TurnResult{Header: Header{RunID: "r", Version: 2}, TrajectoryID: "t", Logprobs: []float32{-0.1, 1.5},
		ServingVersion: 7, Tokens: []int32{1, 2}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %#v\nwant %#v", m, want)
	}
}
