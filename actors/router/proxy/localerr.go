package proxy

import (
	"context"
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

// inProcessTimeout reports whether err is a call to a replica served in
// this process (internal/inproc marks its errors with InProcess) that
// ran out of time. Such a replica cannot be partitioned or crash apart
// from the router — a stopped one is refused over the network — so the
// timeout measures this process's load, not the replica: under overload
// (issue 22, thousands of trajectories on 2 cores) one-second probes
// timed out and every engine was marked unhealthy, failing every turn
// with "no replica available".
func inProcessTimeout(err error) bool {
	var ip interface{ InProcess() bool }
	return errors.Is(err, context.DeadlineExceeded) && errors.As(err, &ip) && ip.InProcess()
}
