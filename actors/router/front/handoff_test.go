package front

import (
	"io"
	"net"
	"testing"
)

// A prefixConn's reads return the bytes read before the hand-off first,
// then the connection's.
func TestPrefixConn(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _, _ = io.WriteString(b, "world") }()
	pc := &prefixConn{Conn: a, pre: []byte("hello ")}
	got := make([]byte, 11)
	if _, err := io.ReadFull(pc, got); err != nil || string(got) != "hello world" {
		t.Fatalf("%q %v", got, err)
	}
}
