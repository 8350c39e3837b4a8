package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Sentinel errors; implementations wrap them with the key at fault.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrInvalidKey: the key breaks the key rules in the package doc.
	ErrInvalidKey = errors.New("store: invalid key")
	// ErrCorrupt: the stored bytes fail the object's own digest (a NATS
	// object whose chunks do not match its metadata).
	ErrCorrupt = errors.New("store: object corrupt")
)

// Store is an object store of weight-version files. See the package doc for
// the guarantees every implementation gives.
type Store interface {
	// Put stores size bytes read from r under key, atomically.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens key for reading; the caller closes the reader.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns the keys starting with prefix, sorted.
	List(ctx context.Context, prefix string) ([]string, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// Commit stores data under key once everything Put before is durable.
	Commit(ctx context.Context, key string, data []byte) error
}

// ValidateKey checks key against the key rules.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if strings.HasPrefix(key, "/") {
		return fmt.Errorf("%w: %q starts with a slash", ErrInvalidKey, key)
	}
	for _, seg := range strings.Split(key, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("%w: %q has an empty segment", ErrInvalidKey, key)
		case seg == "." || seg == "..":
			return fmt.Errorf("%w: %q has a %q segment", ErrInvalidKey, key, seg)
		case strings.HasPrefix(seg, ".tmp-"):
			return fmt.Errorf("%w: %q: segments starting with .tmp- are reserved", ErrInvalidKey, key)
		case strings.ContainsAny(seg, "\\\x00"):
			return fmt.Errorf("%w: %q holds a backslash or NUL", ErrInvalidKey, key)
		}
	}
	return nil
}

// validatePrefix accepts "" (everything) or a key-like prefix; a trailing
// slash is allowed.
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	p := strings.TrimSuffix(prefix, "/")
	if p == "" {
		return fmt.Errorf("%w: prefix %q", ErrInvalidKey, prefix)
	}
	// The last segment may be partial ("delta-000"), so only the rules that
	// hold for any segment are checked.
	return ValidateKey(p)
}

// ReadAll reads a whole object.
func ReadAll(ctx context.Context, s Store, key string) ([]byte, error) {
	rc, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("store: reading %s: %w", key, err)
	}
	return b, nil
}

// PutBytes stores data under key.
func PutBytes(ctx context.Context, s Store, key string, data []byte) error {
	return s.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
}
