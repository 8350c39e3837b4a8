package store

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sync/errgroup"
)

// FileObject pairs an object key with a local file path.
type FileObject struct {
	Key  string
	Path string
}

// DefaultWorkers is the default number of parallel transfers.
const DefaultWorkers = 4

// PutFiles uploads files with at most workers transfers at a time
// (workers ≤ 0 means DefaultWorkers). The first error cancels the rest.
func PutFiles(ctx context.Context, s Store, files []FileObject, workers int) error {
	if workers <= 0 {
		workers = DefaultWorkers
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, fo := range files {
		g.Go(func() error {
			f, err := os.Open(fo.Path)
			if err != nil {
				return fmt.Errorf("store: upload %s: %w", fo.Key, err)
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return fmt.Errorf("store: upload %s: %w", fo.Key, err)
			}
			return s.Put(ctx, fo.Key, f, st.Size())
		})
	}
	return g.Wait()
}

// GetFiles downloads objects to their paths (creating directories) with at
// most workers transfers at a time. Each file is written to a temporary
// name, fsynced and renamed, so a cut download leaves no partial file.
func GetFiles(ctx context.Context, s Store, files []FileObject, workers int) error {
	if workers <= 0 {
		workers = DefaultWorkers
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, fo := range files {
		g.Go(func() error { return GetFile(ctx, s, fo.Key, fo.Path) })
	}
	return g.Wait()
}

// GetFile downloads one object to path atomically.
func GetFile(ctx context.Context, s Store, key, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("store: download %s: %w", key, err)
	}
	rc, err := s.Get(ctx, key)
	if err != nil {
		return err
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("store: download %s: %w", key, err)
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, ctxReader{ctx, rc})
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("store: download %s: %w", key, err)
	}
	return nil
}
