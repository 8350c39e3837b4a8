package wiring

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/model/transformer"
)

// ModelDir is the run's Hugging Face checkpoint directory, "" for the
// built-in policy (config model section, docs/models.md): model.path when
// it holds a checkpoint; otherwise, with model.arch, a checkpoint
// random-initialised from run.seed (asyncrl model init) into model.path, or
// under run.data_dir/models when model.path is empty — written once and
// reused by later runs with the same arch, preset and seed. created says
// whether this call wrote it. A checkpoint of another architecture than
// model.arch is refused.
func ModelDir(c config.Config) (dir string, created bool, err error) {
	m := c.Model
	if !m.HF() {
		return "", false, nil
	}
	dir = m.Path
	if dir == "" {
		dir = filepath.Join(c.Run.DataDir, "models", fmt.Sprintf("%s-%s-seed%d", m.Arch, m.Preset, c.Run.Seed))
	}
	mt, err := transformer.ModelType(dir)
	switch {
	case err == nil && m.Arch != config.ArchNone && mt != string(m.Arch):
		return "", false, fmt.Errorf("model.arch is %s but %s holds a %s checkpoint: point model.path elsewhere or drop model.arch", m.Arch, dir, mt)
	case err == nil:
		if !transformer.Supported(mt) {
			return "", false, fmt.Errorf("model.path: %s holds a %q checkpoint; asyncrl runs %v (docs/models.md)", dir, mt, transformer.Archs())
		}
		return dir, false, nil
	case m.Arch == config.ArchNone:
		return "", false, fmt.Errorf("model.path: %s: %w (give a Hugging Face checkpoint directory, or model.arch to create one there)", dir, err)
	}
	if _, serr := os.Stat(filepath.Join(dir, transformer.ConfigFileName)); !errors.Is(serr, os.ErrNotExist) {
		return "", false, fmt.Errorf("model.path: %s: %w", dir, err)
	}
	if _, err := transformer.Create(transformer.CreateOptions{Arch: string(m.Arch), Preset: string(m.Preset),
		Tokenizer: m.Tokenizer, Out: dir, Seed: uint64(c.Run.Seed)}); err != nil {
		_ = os.RemoveAll(dir)
		return "", false, fmt.Errorf("model: initialising %s %s in %s: %w", m.Arch, m.Preset, dir, err)
	}
	return dir, true, nil
}

// CheckServing verifies a trainer child's serving checkpoint of a Hugging
// Face architecture before it is published: config.json, every tensor
// present with its shape and dtype (headers only, no weights read).
func CheckServing(dir string) error {
	r, err := transformer.Inspect(dir)
	if err != nil {
		return err
	}
	if !r.Valid {
		return fmt.Errorf("%s: %s", dir, r.Problem)
	}
	return nil
}

// RunTokenizer is the run's tokenizer: engines.external[0].tokenizer when
// given (a directory or a tokenizer.json), else the Hugging Face model's
// directory modelDir; "" for the built-in policy's characters.
func RunTokenizer(c config.Config, modelDir string) string {
	if dir := TokenizerDir(c.Engines); dir != "" {
		return dir
	}
	return TokenizerIn(modelDir)
}
