//go:build !linux

package proxy

import "net"

// serveLoop is the fast front off Linux: the loop front needs epoll.
func (r *Router) serveLoop(ln net.Listener) error { return r.serveFast(ln) }

// loopMaxAnswer is loop_linux.go's limit (the tests set it on any system).
var loopMaxAnswer int64 = 1 << 20
