package delta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/asyncrl/asyncrl/weights/store"
)

// Kinds of snapshot versions (besides deltas).
const (
	// KindFull is a complete checkpoint directory.
	KindFull = "full"
	// KindLoRA is a LoRA adapter: adapter_model.safetensors and
	// adapter_config.json (PEFT's layout, which vLLM loads).
	KindLoRA = "lora"
)

// LoRA adapter file names.
const (
	LoRAWeightsName = "adapter_model.safetensors"
	LoRAConfigName  = "adapter_config.json"
)

// SnapshotManifest is the manifest.json of a full-{v:08d}/ or
// lora-{v:08d}/ version: whole files with checksums. It is asyncrl's own
// (SkyRL's format covers deltas only) and mirrors the delta manifest's
// naming.
type SnapshotManifest struct {
	Version       int64          `json:"version"`
	Kind          string         `json:"kind"`
	Files         []SnapshotFile `json:"files"`
	TotalNumBytes int64          `json:"total_num_bytes"`
}

// SnapshotFile is one file of a snapshot version.
type SnapshotFile struct {
	Name              string `json:"name"`
	NumBytes          int64  `json:"num_bytes"`
	Checksum          string `json:"checksum"`
	ChecksumAlgorithm string `json:"checksum_algorithm"`
}

// SnapshotDir is the directory of a full or LoRA version.
func SnapshotDir(kind string, version int64) string { return fmt.Sprintf("%s-%08d", kind, version) }

// PublishSnapshot uploads every regular file of dir as version of kind
// (KindFull or KindLoRA), in parallel, then commits its manifest. A LoRA
// directory must hold adapter_model.safetensors and adapter_config.json.
func PublishSnapshot(ctx context.Context, st store.Store, kind string, version int64, dir string, workers int) (*SnapshotManifest, error) {
	if kind != KindFull && kind != KindLoRA {
		return nil, fmt.Errorf("delta: snapshot kind %q: want %q or %q", kind, KindFull, KindLoRA)
	}
	if version < 0 {
		return nil, fmt.Errorf("delta: snapshot version %d: want ≥ 0", version)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("delta: snapshot: %w", err)
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	if kind == KindLoRA && (!slices.Contains(names, LoRAWeightsName) || !slices.Contains(names, LoRAConfigName)) {
		return nil, fmt.Errorf("delta: LoRA adapter %s must hold %s and %s (has %v)", dir, LoRAWeightsName, LoRAConfigName, names)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("delta: snapshot: %s holds no files", dir)
	}
	prefix := SnapshotDir(kind, version)
	if rc, err := st.Get(ctx, prefix+"/"+ManifestName); err == nil {
		rc.Close()
		return nil, fmt.Errorf("delta: %s is already committed", prefix)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("delta: checking %s: %w", prefix, err)
	}
	m := &SnapshotManifest{Version: version, Kind: kind}
	var files []store.FileObject
	for _, n := range names {
		sum, size, err := hashFile(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		m.Files = append(m.Files, SnapshotFile{Name: n, NumBytes: size, Checksum: sum, ChecksumAlgorithm: ChecksumXXH3})
		m.TotalNumBytes += size
		files = append(files, store.FileObject{Key: prefix + "/" + n, Path: filepath.Join(dir, n)})
	}
	if err := store.PutFiles(ctx, st, files, workers); err != nil {
		return nil, fmt.Errorf("delta: publish %s: %w", prefix, err)
	}
	js, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := st.Commit(ctx, prefix+"/"+ManifestName, append(js, '\n')); err != nil {
		return nil, fmt.Errorf("delta: commit %s: %w", prefix, err)
	}
	return m, nil
}

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("delta: %w", err)
	}
	defer f.Close()
	h := xxh3.New128()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("delta: hashing %s: %w", path, err)
	}
	b := h.Sum128().Bytes()
	return fmt.Sprintf("%x", b[:]), n, nil
}

// SnapshotVersions lists the committed versions of kind, ascending.
func SnapshotVersions(ctx context.Context, st store.Store, kind string) ([]int64, error) {
	keys, err := st.List(ctx, kind+"-")
	if err != nil {
		return nil, fmt.Errorf("delta: list %s versions: %w", kind, err)
	}
	var vs []int64
	for _, k := range keys {
		d, file, ok := strings.Cut(k, "/")
		if !ok || file != ManifestName {
			continue
		}
		if v, ok := parseVersionDir(d, kind+"-"); ok {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}

// FetchSnapshot downloads a full or LoRA version into dst and verifies every
// file's size and checksum; a bad file is an ErrChecksum and is removed.
func FetchSnapshot(ctx context.Context, st store.Store, kind string, version int64, dst string, workers int) (*SnapshotManifest, error) {
	prefix := SnapshotDir(kind, version)
	m, err := ReadSnapshotManifest(ctx, st, kind, version)
	if err != nil {
		return nil, err
	}
	var files []store.FileObject
	for _, f := range m.Files {
		if f.Name == "" || strings.ContainsAny(f.Name, "/\\") || strings.HasPrefix(f.Name, ".") {
			return nil, fmt.Errorf("%w: %s: file name %q", ErrManifest, prefix, f.Name)
		}
		files = append(files, store.FileObject{Key: prefix + "/" + f.Name, Path: filepath.Join(dst, f.Name)})
	}
	if err := store.GetFiles(ctx, st, files, workers); err != nil {
		return nil, fmt.Errorf("delta: fetch %s: %w", prefix, err)
	}
	for _, f := range m.Files {
		p := filepath.Join(dst, f.Name)
		sum, size, err := hashFile(p)
		if err != nil {
			return nil, err
		}
		if f.ChecksumAlgorithm != ChecksumXXH3 || sum != f.Checksum || size != f.NumBytes {
			os.Remove(p)
			return nil, fmt.Errorf("%w: %s/%s: %d bytes %s, manifest says %d bytes %s", ErrChecksum, prefix, f.Name, size, sum, f.NumBytes, f.Checksum)
		}
	}
	return m, nil
}

// ReadSnapshotManifest reads the manifest of a full or LoRA version.
func ReadSnapshotManifest(ctx context.Context, st store.Store, kind string, version int64) (*SnapshotManifest, error) {
	prefix := SnapshotDir(kind, version)
	raw, err := store.ReadAll(ctx, st, prefix+"/"+ManifestName)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNoVersion, prefix)
	}
	if err != nil {
		return nil, fmt.Errorf("delta: read %s: %w", prefix, err)
	}
	var m SnapshotManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrManifest, prefix, err)
	}
	if m.Version != version || m.Kind != kind {
		return nil, fmt.Errorf("%w: %s says %s version %d", ErrManifest, prefix, m.Kind, m.Version)
	}
	return &m, nil
}
