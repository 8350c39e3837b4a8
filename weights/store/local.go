package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Local is a Store in a directory on local disk or NFS. Objects are plain
// files under Root at their key's path, so a SkyRL receiver pointed at Root
// as its sync_dir reads the same layout. Writes go to a temporary file in
// the target directory, are fsynced, then renamed into place: rename is
// atomic on POSIX file systems (and on NFS for a single client), so readers
// never see a partial object.
type Local struct {
	root string
}

var _ Store = (*Local)(nil)

// NewLocal returns a store rooted at dir, creating it if needed.
func NewLocal(dir string) (*Local, error) {
	if dir == "" {
		return nil, errors.New("store: local: empty root directory")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: local: %w", err)
	}
	return &Local{root: dir}, nil
}

// Root is the directory the store lives in.
func (l *Local) Root() string { return l.root }

// Path is the file path of key (for readers that want random access).
func (l *Local) Path(key string) string { return filepath.Join(l.root, filepath.FromSlash(key)) }

// Put implements Store.
func (l *Local) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return l.put(ctx, key, r, size, false)
}

// Commit implements Store: the directory entries of earlier Puts were
// already made durable by their own fsyncs of file data; the rename of the
// committed file is followed by an fsync of its directory so the commit
// survives a crash.
func (l *Local) Commit(ctx context.Context, key string, data []byte) error {
	return l.put(ctx, key, bytes.NewReader(data), int64(len(data)), true)
}

func (l *Local) put(ctx context.Context, key string, r io.Reader, size int64, syncDir bool) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	path := l.Path(key)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("store: local: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("store: local: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	n, err := io.Copy(tmp, ctxReader{ctx, r})
	if err == nil && size >= 0 && n != size {
		err = fmt.Errorf("store: local: %s: got %d bytes, declared %d", key, n, size)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store: local: put %s: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("store: local: %w", err)
	}
	if syncDir {
		if err := syncDirectory(dir); err != nil {
			return fmt.Errorf("store: local: commit %s: %w", key, err)
		}
	}
	return nil
}

func syncDirectory(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Get implements Store.
func (l *Local) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	f, err := os.Open(l.Path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("store: local: %w", err)
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is a directory", ErrNotFound, key)
	}
	return f, nil
}

// List implements Store. Temporary files of unfinished Puts are skipped.
func (l *Local) List(ctx context.Context, prefix string) ([]string, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	var keys []string
	err := filepath.WalkDir(l.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".tmp-") {
			return nil
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(l.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: local: list %q: %w", prefix, err)
	}
	slices.Sort(keys)
	return keys, nil
}

// Delete implements Store; it also removes directories left empty, up to
// (not including) the root.
func (l *Local) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	path := l.Path(key)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("store: local: %w", err)
	}
	for dir := filepath.Dir(path); dir != filepath.Clean(l.root) && strings.HasPrefix(dir, filepath.Clean(l.root)); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil { // not empty (or gone): stop
			break
		}
	}
	return nil
}

// ctxReader stops a long copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
