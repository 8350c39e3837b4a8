//go:build !linux

package front

import "net"

// serveLoop is the fast front off Linux: the loop front needs epoll.
func (s *Server) serveLoop(ln net.Listener) error { return s.serveFast(ln) }
