//go:build linux

package data

import (
	"io"
	"os"
	"syscall"
)

// mapFile maps a file read-only. The mapping outlives the descriptor.
func mapFile(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
}

func unmapFile(b []byte) error {
	if b == nil {
		return nil
	}
	return syscall.Munmap(b)
}

// preadFull reads len(b) bytes at off with pread(2) directly (no poller
// round trip: this is on every row's path).
func preadFull(f *os.File, b []byte, off int64) error {
	fd := int(f.Fd())
	for len(b) > 0 {
		n, err := syscall.Pread(fd, b, off)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// dropPages releases a mapping's resident pages from the process (the
// page cache keeps them; the next access faults them back in).
func dropPages(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return syscall.Madvise(b, syscall.MADV_DONTNEED)
}
