//go:build linux

package data

import (
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

// dropPages tells the kernel the process no longer needs the mapped pages:
// they leave its resident set (they stay in the page cache, and a later
// read maps them again), which keeps RSS flat however large the dataset.
func dropPages(b []byte) {
	if len(b) > 0 {
		_ = syscall.Madvise(b, syscall.MADV_DONTNEED)
	}
}
