package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// IndexFileName is the Hugging Face name of a sharded checkpoint's index.
const IndexFileName = "model.safetensors.index.json"

// SingleFileName is the name of an unsharded checkpoint.
const SingleFileName = "model.safetensors"

// Index is the content of model.safetensors.index.json.
type Index struct {
	Metadata struct {
		TotalSize int64 `json:"total_size"`
	} `json:"metadata"`
	// WeightMap maps each tensor name to the shard file (a base name in the
	// same directory) that holds it.
	WeightMap map[string]string `json:"weight_map"`
}

// WriteSharded writes tensors into dir. If they fit in maxShardBytes of
// data (or maxShardBytes ≤ 0) it writes a single model.safetensors;
// otherwise model-00001-of-0000N.safetensors shards, each holding whole
// tensors in order and at most maxShardBytes of data unless one tensor alone
// is larger, plus model.safetensors.index.json (written last). Every shard
// carries metadata. It returns the file names written.
func WriteSharded(dir string, tensors []Tensor, maxShardBytes int64, metadata map[string]string) ([]string, error) {
	var shards [][]Tensor
	var cur []Tensor
	var curSize, total int64
	for _, t := range tensors {
		sz := int64(len(t.Data))
		total += sz
		if maxShardBytes > 0 && len(cur) > 0 && curSize+sz > maxShardBytes {
			shards = append(shards, cur)
			cur, curSize = nil, 0
		}
		cur = append(cur, t)
		curSize += sz
	}
	shards = append(shards, cur)
	if len(shards) == 1 {
		if err := WriteFile(filepath.Join(dir, SingleFileName), tensors, metadata); err != nil {
			return nil, err
		}
		// A stale index from an earlier sharded save would shadow the file.
		if err := os.Remove(filepath.Join(dir, IndexFileName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("safetensors: %w", err)
		}
		return []string{SingleFileName}, nil
	}
	var idx Index
	idx.Metadata.TotalSize = total
	idx.WeightMap = map[string]string{}
	var names []string
	for i, sh := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if err := WriteFile(filepath.Join(dir, name), sh, metadata); err != nil {
			return nil, err
		}
		for _, t := range sh {
			if _, dup := idx.WeightMap[t.Name]; dup {
				return nil, fmt.Errorf("%w: duplicate tensor name %q", ErrFormat, t.Name)
			}
			idx.WeightMap[t.Name] = name
		}
		names = append(names, name)
	}
	js, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(dir, IndexFileName), js); err != nil {
		return nil, err
	}
	return append(names, IndexFileName), nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	if err := os.Chmod(tmp.Name(), FileMode); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}

// Checkpoint is a checkpoint directory opened for reading: a single
// model.safetensors or the shards named by model.safetensors.index.json.
type Checkpoint struct {
	files  map[string]*File // by shard base name
	where  map[string]string
	names  []string
	shards []string
}

// OpenDir opens the checkpoint in dir, preferring the index when present.
// It checks that the index names existing shards, that every shard tensor
// is in the index and vice versa, and that total_size matches.
func OpenDir(dir string) (*Checkpoint, error) {
	c := &Checkpoint{files: map[string]*File{}, where: map[string]string{}}
	js, err := os.ReadFile(filepath.Join(dir, IndexFileName))
	switch {
	case errors.Is(err, os.ErrNotExist):
		f, err := Open(filepath.Join(dir, SingleFileName))
		if err != nil {
			return nil, err
		}
		c.files[SingleFileName] = f
		c.shards = []string{SingleFileName}
		for _, t := range f.Tensors {
			c.where[t.Name] = SingleFileName
		}
	case err != nil:
		return nil, fmt.Errorf("safetensors: %w", err)
	default:
		if err := c.openIndexed(dir, js); err != nil {
			c.Close()
			return nil, err
		}
	}
	for n := range c.where {
		c.names = append(c.names, n)
	}
	slices.Sort(c.names)
	return c, nil
}

// openIndexed opens the shards the index js names and checks the index
// against them; the caller closes c on error.
func (c *Checkpoint) openIndexed(dir string, js []byte) error {
	var idx Index
	if err := json.Unmarshal(js, &idx); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrFormat, IndexFileName, err)
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("%w: %s: empty weight_map", ErrFormat, IndexFileName)
	}
	for _, shard := range idx.WeightMap {
		if _, ok := c.files[shard]; ok {
			continue
		}
		if shard != filepath.Base(shard) || strings.HasPrefix(shard, ".") {
			return fmt.Errorf("%w: %s: shard %q is not a plain file name", ErrFormat, IndexFileName, shard)
		}
		f, err := Open(filepath.Join(dir, shard))
		if err != nil {
			return err
		}
		c.files[shard] = f
		c.shards = append(c.shards, shard)
	}
	slices.Sort(c.shards)
	return c.checkIndex(&idx)
}

// checkIndex checks that every tensor of the shards is where the index
// says and every indexed tensor was found, and the index's total size.
func (c *Checkpoint) checkIndex(idx *Index) error {
	var total int64
	for _, shard := range c.shards {
		f := c.files[shard]
		total += f.DataSize
		for _, t := range f.Tensors {
			if want, ok := idx.WeightMap[t.Name]; !ok || want != shard {
				return fmt.Errorf("%w: %s: tensor %q found in %s but the index says %q", ErrFormat, IndexFileName, t.Name, shard, want)
			}
			c.where[t.Name] = shard
		}
	}
	for name, shard := range idx.WeightMap {
		if _, ok := c.where[name]; !ok {
			return fmt.Errorf("%w: %s: tensor %q is not in shard %s", ErrFormat, IndexFileName, name, shard)
		}
	}
	if idx.Metadata.TotalSize != 0 && idx.Metadata.TotalSize != total {
		return fmt.Errorf("%w: %s: total_size %d but the shards hold %d bytes", ErrFormat, IndexFileName, idx.Metadata.TotalSize, total)
	}
	return nil
}

// Names returns every tensor name, sorted.
func (c *Checkpoint) Names() []string { return c.names }

// Shards returns the shard file names, sorted.
func (c *Checkpoint) Shards() []string { return c.shards }

// Shard returns the open file of one shard (a name from Shards).
func (c *Checkpoint) Shard(shard string) (*File, bool) {
	f, ok := c.files[shard]
	return f, ok
}

// ShardOf returns the base name of the file holding name ("" if none), so
// errors about a tensor can name its file.
func (c *Checkpoint) ShardOf(name string) string { return c.where[name] }

// File returns the open file holding name.
func (c *Checkpoint) File(name string) (*File, error) {
	shard, ok := c.where[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return c.files[shard], nil
}

// ReadTensor reads one tensor's bytes from whichever shard holds it.
func (c *Checkpoint) ReadTensor(name string) ([]byte, TensorInfo, error) {
	f, err := c.File(name)
	if err != nil {
		return nil, TensorInfo{}, err
	}
	return f.ReadTensor(name)
}

// ReadFloat32 reads an F32/BF16/F16 tensor as float32.
func (c *Checkpoint) ReadFloat32(name string) ([]float32, TensorInfo, error) {
	f, err := c.File(name)
	if err != nil {
		return nil, TensorInfo{}, err
	}
	return f.ReadFloat32(name)
}

// Metadata returns the __metadata__ of the first shard (writers put the same
// metadata in every shard).
func (c *Checkpoint) Metadata() map[string]string {
	if len(c.shards) == 0 {
		return nil
	}
	return c.files[c.shards[0]].Metadata
}

// Close closes every shard.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, s := range c.shards {
		errs = append(errs, c.files[s].Close())
	}
	return errors.Join(errs...)
}
