// Package fsutil holds the file helpers the weights packages and the engine share: one
// checkpoint-directory copy that the receiver's reset and the tests' fixtures
// both use.
package fsutil

import (
	"io"
	"os"
	"path/filepath"
)

// CopyDir copies the regular files directly in src into dst, creating dst
// when missing. Subdirectories, links and other non-regular entries are
// skipped: a checkpoint is a flat directory of shards and an index. Every
// copied file is synced before it is closed, so a directory renamed into
// place after CopyDir holds complete files even across a crash.
func CopyDir(dst, src string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(dst, e.Name()), filepath.Join(src, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
