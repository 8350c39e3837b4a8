package delta

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/asyncrl/asyncrl/weights/store"
)

// Versions lists the committed delta versions in st (those with a
// manifest.json), ascending. Directories without a manifest are a publish
// that did not finish and are not versions.
func Versions(ctx context.Context, st store.Store) ([]int64, error) {
	keys, err := st.List(ctx, "delta-")
	if err != nil {
		return nil, fmt.Errorf("delta: list versions: %w", err)
	}
	var vs []int64
	for _, k := range keys {
		dir, file, ok := strings.Cut(k, "/")
		if !ok || file != ManifestName {
			continue
		}
		if v, ok := ParseDeltaDir(dir); ok {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}

// Latest is the newest committed delta version, or 0 (the base) if none.
func Latest(ctx context.Context, st store.Store) (int64, error) {
	vs, err := Versions(ctx, st)
	if err != nil || len(vs) == 0 {
		return 0, err
	}
	return vs[len(vs)-1], nil
}

// ReadManifest reads and validates version's manifest from st.
func ReadManifest(ctx context.Context, st store.Store, version int64) (*Manifest, error) {
	b, err := store.ReadAll(ctx, st, ManifestKey(version))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %d (no %s)", ErrNoVersion, version, ManifestKey(version))
	}
	if err != nil {
		return nil, fmt.Errorf("delta: read manifest of version %d: %w", version, err)
	}
	return parseManifestOf(b, version)
}

func parseManifestOf(b []byte, version int64) (*Manifest, error) {
	m, err := ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("version %d: %w", version, err)
	}
	if m.Version != version {
		return nil, fmt.Errorf("%w: %s says version %d", ErrChain, ManifestKey(version), m.Version)
	}
	return m, nil
}

// ReadManifestDir reads the manifest of a version directory on disk.
func ReadManifestDir(dir string, version int64) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %d (no %s in %s)", ErrNoVersion, version, ManifestName, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("delta: %w", err)
	}
	return parseManifestOf(b, version)
}

// Fetch downloads version's payload files from st into dir (created if
// needed) with at most workers parallel transfers, then writes the manifest
// there last, so a directory with a manifest.json holds a complete fetch.
// A complete fetch already in dir with the same manifest is reused.
func Fetch(ctx context.Context, st store.Store, version int64, dir string, workers int) (*Manifest, error) {
	raw, err := store.ReadAll(ctx, st, ManifestKey(version))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %d (no %s)", ErrNoVersion, version, ManifestKey(version))
	}
	if err != nil {
		return nil, fmt.Errorf("delta: fetch version %d: %w", version, err)
	}
	m, err := parseManifestOf(raw, version)
	if err != nil {
		return nil, err
	}
	local := filepath.Join(dir, ManifestName)
	if have, err := os.ReadFile(local); err == nil && bytes.Equal(have, raw) {
		return m, nil
	}
	// A stale or partial earlier fetch: drop its manifest first so a crash
	// mid-download cannot leave old manifest + new payloads.
	if err := os.Remove(local); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("delta: %w", err)
	}
	files := make([]store.FileObject, len(m.PayloadFiles))
	for i, name := range m.PayloadFiles {
		files[i] = store.FileObject{Key: DeltaDir(version) + "/" + name, Path: filepath.Join(dir, name)}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("delta: %w", err)
	}
	if err := store.GetFiles(ctx, st, files, workers); err != nil {
		return nil, fmt.Errorf("delta: fetch version %d: %w", version, err)
	}
	ls, err := store.NewLocal(dir)
	if err != nil {
		return nil, err
	}
	if err := ls.Commit(ctx, ManifestName, raw); err != nil {
		return nil, fmt.Errorf("delta: fetch version %d: %w", version, err)
	}
	return m, nil
}
