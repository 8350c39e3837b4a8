// Package faultconn injects a connection killed mid-transfer, for the
// data-plane tests of several packages.
package faultconn

import (
	"errors"
	"net"
)

// ErrKilled is what a Read returns once the connection was killed.
var ErrKilled = errors.New("injected: connection killed")

// KillAfter wraps conn so it closes itself after limit bytes were read, as
// when a peer or a link dies mid-transfer.
func KillAfter(conn net.Conn, limit int64) net.Conn { return &killing{Conn: conn, left: limit} }

type killing struct {
	net.Conn
	left int64
}

func (c *killing) Read(p []byte) (int, error) {
	if c.left <= 0 {
		c.Conn.Close()
		return 0, ErrKilled
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.Conn.Read(p)
	c.left -= int64(n)
	return n, err
}
