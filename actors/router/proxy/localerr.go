package proxy

import (
	"errors"
	"syscall"
)

// localResourceError reports whether err is the router's own machine
// running out of something while calling a replica — file descriptors
// (EMFILE, ENFILE), socket buffers or memory (ENOBUFS, ENOMEM), ephemeral
// ports (EADDRNOTAVAIL) — rather than the replica failing. Such an error
// says nothing about the replica's health: counting it would mark every
// engine unhealthy at once when the process ran out of sockets (issue 22:
// ~16k trajectories in flight did exactly that), and the run would lose
// its engines to its own client's overload.
func localResourceError(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.EADDRNOTAVAIL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// upstreamFailed counts a failed upstream call against the replica,
// unless the failure was local (localResourceError).
func (r *Router) upstreamFailed(replica string, err error) {
	if localResourceError(err) {
		r.metrics.errors.WithLabelValues(replica, "local_resources").Inc()
		return
	}
	r.passiveFailure(replica)
}
