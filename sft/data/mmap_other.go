//go:build !linux

package data

import (
	"io"
	"os"
)

// mapFile reads the file whole where this package does not memory-map.
func mapFile(f *os.File, size int64) ([]byte, error) {
	b := make([]byte, size)
	_, err := io.ReadFull(f, b)
	return b, err
}

func unmapFile([]byte) error { return nil }

func preadFull(f *os.File, b []byte, off int64) error {
	_, err := f.ReadAt(b, off)
	return err
}

func dropPages([]byte) error { return nil }
