package tcp

import (
	"bytes"
	"testing"
)

// The server parses requests from any peer: arbitrary bytes must yield a
// request or an error, never a panic, and valid requests round-trip.
func FuzzReadRequest(f *testing.F) {
	var buf bytes.Buffer
	writeRequest(&buf, request{id: "run/v7", index: 3, offset: 1 << 40, length: 4096})
	f.Add(buf.Bytes())
	f.Add([]byte("ADP1\xff\xff"))
	f.Add([]byte("XXXX\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := readRequest(bytes.NewReader(data))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := writeRequest(&out, req); err != nil {
			t.Fatal(err)
		}
		again, err := readRequest(&out)
		if err != nil || again != req {
			t.Fatalf("round trip: %+v → %+v, %v", req, again, err)
		}
	})
}

func TestStatusRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	writeStatus(&buf, statusBadRequest, "range 9 of 2")
	st, msg, err := readStatus(&buf)
	if err != nil || st != statusBadRequest || msg != "range 9 of 2" {
		t.Fatalf("readStatus = %d %q %v", st, msg, err)
	}
	if _, _, err := readStatus(bytes.NewReader([]byte{0, 0, 5, 'a'})); err == nil {
		t.Fatal("truncated status accepted")
	}
}
