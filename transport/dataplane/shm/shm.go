package shm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
)

// Config configures the shared-memory data plane.
type Config struct {
	// Dir holds published files; it must be a tmpfs for the transfer to
	// stay in memory. Default "/dev/shm".
	Dir string
	// Workers is how many ranges are copied (and verified) at once on each
	// side (>= 1). One core's memmove does not saturate memory bandwidth.
	// Default 4.
	Workers int
	// ChunkBytes is the piece copied then hashed while still in cache
	// (>= 4 KiB). Default 4 MiB.
	ChunkBytes int
	// KeepFiles is how many published files are kept, once their Offer is
	// closed, for the next Publish to overwrite: weights of the same model
	// have the same size every version, and writing into pages tmpfs
	// already holds skips allocating and zeroing them. 0 unlinks at once.
	// Default 2.
	KeepFiles int
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{Dir: "/dev/shm", Workers: 4, ChunkBytes: 4 << 20, KeepFiles: 2}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Dir == "":
		return fmt.Errorf("shm: Config.Dir must be a directory path, got empty")
	case c.Workers < 1:
		return fmt.Errorf("shm: Config.Workers must be >= 1, got %d", c.Workers)
	case c.ChunkBytes < 4096:
		return fmt.Errorf("shm: Config.ChunkBytes must be >= 4096, got %d", c.ChunkBytes)
	case c.KeepFiles < 0:
		return fmt.Errorf("shm: Config.KeepFiles must be >= 0, got %d", c.KeepFiles)
	}
	return nil
}

// Backend is the shared-memory data plane.
type Backend struct {
	cfg Config

	mu   sync.Mutex
	kept []string // closed offers' files, most recent last
}

var _ dataplane.Backend = (*Backend)(nil)

// New validates cfg.
func New(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Backend{cfg: cfg}, nil
}

// Name implements dataplane.Backend.
func (b *Backend) Name() string { return "shm" }

// Available implements dataplane.Backend.
func (b *Backend) Available() error {
	st, err := os.Stat(b.cfg.Dir)
	if err != nil {
		return fmt.Errorf("%w: shm: %w", dataplane.ErrUnavailable, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: shm: %s is not a directory", dataplane.ErrUnavailable, b.cfg.Dir)
	}
	if err := syscall.Access(b.cfg.Dir, 2 /* W_OK */); err != nil {
		return fmt.Errorf("%w: shm: %s is not writable: %w", dataplane.ErrUnavailable, b.cfg.Dir, err)
	}
	return nil
}

// Publish implements dataplane.Backend.
func (b *Backend) Publish(ctx context.Context, p *messages.TransferPlan, src io.ReaderAt) (dataplane.Offer, error) {
	end, err := dataplane.ValidateRanges(p.Ranges)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(b.cfg.Dir, "asyncrl-dp-"+sanitize(p.TransferID)+"-"+randomSuffix())
	flags := os.O_RDWR | os.O_CREATE | os.O_EXCL
	if old := b.takeKept(); old != "" {
		// Renaming gives the reused file a fresh URI, so a destination of
		// the previous transfer cannot mistake it for its own.
		if err := os.Rename(old, path); err == nil {
			flags = os.O_RDWR
		}
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("shm: publish %q: %w", p.TransferID, err)
	}
	defer f.Close()
	fail := func(err error) (dataplane.Offer, error) {
		os.Remove(path)
		return nil, fmt.Errorf("shm: publish %q: %w", p.TransferID, err)
	}
	if err := f.Truncate(end); err != nil {
		return fail(err)
	}
	slicer, _ := src.(dataplane.Slicer)
	err = b.parallel(ctx, p.Ranges, func(i int, r messages.ByteRange) error {
		if slicer != nil {
			s, err := slicer.Slice(r.Offset, r.Length)
			if err != nil {
				return err
			}
			// pwrite: one copy into the page cache, pages allocated in
			// batches rather than one fault per 4 KiB page of a mapping.
			_, err = f.WriteAt(s, r.Offset)
			return err
		}
		_, err := io.Copy(io.NewOffsetWriter(f, r.Offset), io.NewSectionReader(src, r.Offset, r.Length))
		return err
	})
	if err != nil {
		return fail(err)
	}
	return &offer{path: path, b: b}, nil
}

// Fetch implements dataplane.Backend.
func (b *Backend) Fetch(ctx context.Context, p *messages.TransferPlan, dst io.WriterAt) (dataplane.Result, error) {
	path, err := ParseURI(p.URI)
	if err != nil {
		return dataplane.Result{}, err
	}
	end, err := dataplane.ValidateRanges(p.Ranges)
	if err != nil {
		return dataplane.Result{}, err
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return dataplane.Result{}, fmt.Errorf("%w: %s: %w", dataplane.ErrUnknownTransfer, p.URI, err)
	}
	if err != nil {
		return dataplane.Result{}, fmt.Errorf("shm: fetch %q: %w", p.TransferID, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return dataplane.Result{}, fmt.Errorf("shm: fetch %q: %w", p.TransferID, err)
	}
	if st.Size() < end {
		return dataplane.Result{}, fmt.Errorf("%w: %s holds %d bytes, the plan's ranges end at %d", dataplane.ErrBadPlan, path, st.Size(), end)
	}
	slicer, _ := dst.(dataplane.Slicer)
	var total int64
	var mu sync.Mutex
	err = b.parallel(ctx, p.Ranges, func(i int, r messages.ByteRange) error {
		chk, err := dataplane.NewChecker(r.Checksum)
		if err != nil {
			return err
		}
		var buf []byte
		for off := int64(0); off < r.Length; off += int64(b.cfg.ChunkBytes) {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%w: %w", dataplane.ErrIncomplete, err)
			}
			n := min(int64(b.cfg.ChunkBytes), r.Length-off)
			var d []byte
			if slicer != nil {
				// pread straight into the sink: one copy out of the page cache.
				if d, err = slicer.Slice(r.Offset+off, n); err != nil {
					return err
				}
			} else {
				if buf == nil {
					buf = make([]byte, b.cfg.ChunkBytes)
				}
				d = buf[:n]
			}
			if _, err := f.ReadAt(d, r.Offset+off); err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
			chk.Write(d) // hashed while still in cache
			if slicer == nil {
				if _, err := dst.WriteAt(d, r.Offset+off); err != nil {
					return err
				}
			}
		}
		if err := chk.Verify(); err != nil {
			return err
		}
		mu.Lock()
		total += r.Length
		mu.Unlock()
		return nil
	})
	return dataplane.Result{Bytes: total}, err
}

// parallel runs fn over the ranges on Config.Workers goroutines and
// returns the failure of the lowest-indexed failing range.
func (b *Backend) parallel(ctx context.Context, ranges []messages.ByteRange, fn func(int, messages.ByteRange) error) error {
	var (
		mu     sync.Mutex
		next   int
		errIdx = -1
		first  error
		wg     sync.WaitGroup
	)
	for range min(b.cfg.Workers, len(ranges)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := errIdx >= 0
				mu.Unlock()
				if i >= len(ranges) || stop {
					return
				}
				if err := ctx.Err(); err != nil {
					err = fmt.Errorf("%w: %w", dataplane.ErrIncomplete, err)
					mu.Lock()
					if errIdx < 0 {
						errIdx, first = i, err
					}
					mu.Unlock()
					return
				}
				if err := fn(i, ranges[i]); err != nil {
					mu.Lock()
					if errIdx < 0 || i < errIdx {
						errIdx, first = i, &dataplane.RangeError{Index: i, Range: ranges[i], Err: err}
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// ParseURI returns the file path of a shm:// or file:// URI.
func ParseURI(uri string) (string, error) {
	u, err := url.Parse(uri)
	if err != nil || (u.Scheme != "shm" && u.Scheme != "file") || u.Path == "" || (u.Host != "" && u.Host != "localhost") {
		return "", fmt.Errorf("%w: URI %q is not shm:///path or file:///path", dataplane.ErrBadPlan, uri)
	}
	return u.Path, nil
}

func sanitize(id string) string {
	var sb strings.Builder
	for _, r := range id {
		if r == '-' || r == '_' || r == '.' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') {
			sb.WriteRune(r)
		} else {
			sb.WriteByte('_')
		}
		if sb.Len() >= 64 {
			break
		}
	}
	return sb.String()
}

func (b *Backend) takeKept() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.kept) == 0 {
		return ""
	}
	p := b.kept[len(b.kept)-1]
	b.kept = b.kept[:len(b.kept)-1]
	return p
}

// keep holds path for reuse under a new name, so its URI stops resolving
// at once, as after an unlink; false means the caller unlinks it.
func (b *Backend) keep(path string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.kept) >= b.cfg.KeepFiles {
		return false
	}
	free := filepath.Join(b.cfg.Dir, "asyncrl-dp-free-"+randomSuffix())
	if err := os.Rename(path, free); err != nil {
		return false
	}
	b.kept = append(b.kept, free)
	return true
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Close unlinks the files kept for reuse. Open Offers stay valid; their
// files are unlinked by their own Close.
func (b *Backend) Close() error {
	b.mu.Lock()
	kept := b.kept
	b.kept, b.cfg.KeepFiles = nil, 0
	b.mu.Unlock()
	var first error
	for _, p := range kept {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) && first == nil {
			first = err
		}
	}
	return first
}

type offer struct {
	path string
	b    *Backend
	once sync.Once
	err  error
}

func (o *offer) URI() string { return (&url.URL{Scheme: "shm", Path: o.path}).String() }

// Close withdraws the file: it is kept for the next Publish (under a new
// name) or unlinked.
func (o *offer) Close() error {
	o.once.Do(func() {
		if o.b != nil && o.b.keep(o.path) {
			return
		}
		if err := os.Remove(o.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			o.err = err
		}
	})
	return o.err
}
