//go:build !linux

package proxy

import "net"

// serveLoop is the fast front off Linux: the loop front needs epoll.
func (r *Router) serveLoop(ln net.Listener) error { return r.serveFast(ln) }
