//go:build linux

package rawio

import (
	"io"
	"syscall"
	"unsafe"
)

const supported = true

// readFD reads once into p (len > 0); again reports EAGAIN.
func readFD(fd uintptr, p []byte) (n int, again bool, err error) {
	n, again, err = call(syscall.SYS_READ, fd, p)
	if n == 0 && !again && err == nil {
		err = io.EOF
	}
	return n, again, err
}

// writeFD writes once from p (len > 0); again reports EAGAIN.
func writeFD(fd uintptr, p []byte) (n int, again bool, err error) {
	return call(syscall.SYS_WRITE, fd, p)
}

// call makes a read or write system call on p without the scheduler's
// hooks, retrying EINTR; again reports EAGAIN (the socket would block).
func call(trap, fd uintptr, p []byte) (n int, again bool, err error) {
	for {
		r, _, e := syscall.RawSyscall(trap, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
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
