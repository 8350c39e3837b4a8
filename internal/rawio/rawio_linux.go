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
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch e {
		case 0:
			if r == 0 {
				return 0, false, io.EOF
			}
			return int(r), false, nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return 0, true, nil
		}
		return 0, false, e
	}
}

// writeFD writes once from p (len > 0); again reports EAGAIN.
func writeFD(fd uintptr, p []byte) (n int, again bool, err error) {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
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
