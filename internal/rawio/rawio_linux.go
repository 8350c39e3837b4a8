//go:build linux

package rawio

import (
	"io"
	"syscall"
	"unsafe"
)

const supported = true

// readFD reads once into p (len > 0); again reports EAGAIN. recvfrom
// rather than read: the socket call skips the file layer (fdget_pos,
// vfs_read), which was 3 % of the router's CPU (issue 22, session 9).
func readFD(fd uintptr, p []byte) (n int, again bool, err error) {
	n, again, err = call(syscall.SYS_RECVFROM, fd, p, 0)
	if n == 0 && !again && err == nil {
		err = io.EOF
	}
	return n, again, err
}

// writeFD writes once from p (len > 0); again reports EAGAIN. sendto,
// as readFD; MSG_NOSIGNAL: a peer that went away is an EPIPE, not a
// signal.
func writeFD(fd uintptr, p []byte) (n int, again bool, err error) {
	return call(syscall.SYS_SENDTO, fd, p, syscall.MSG_NOSIGNAL)
}

// Recv reads once from the non-blocking socket fd into p (len > 0): n
// bytes, or io.EOF at the end; again reports EAGAIN. For a caller that
// owns the descriptor and its waiting (the router's loop front).
func Recv(fd int, p []byte) (n int, again bool, err error) { return readFD(uintptr(fd), p) }

// Send writes once from p (len > 0) to the non-blocking socket fd, as
// Recv reads (MSG_NOSIGNAL: a vanished peer is an EPIPE).
func Send(fd int, p []byte) (n int, again bool, err error) { return writeFD(uintptr(fd), p) }

// call makes a recvfrom or sendto system call on p (no address) without
// the scheduler's hooks, retrying EINTR; again reports EAGAIN (the socket
// would block).
func call(trap, fd uintptr, p []byte, flags uintptr) (n int, again bool, err error) {
	for {
		r, _, e := syscall.RawSyscall6(trap, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), flags, 0, 0)
		switch e {
		case 0:
			return int(r), false, nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, true, nil
		}
		return 0, false, e
	}
}
