package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/model/transformer"
	"github.com/asyncrl/asyncrl/tinker/bridgetrain"
)

// A Hugging Face base model (tinker.base_models, docs/tinker.md "Base
// models"): the checkpoint directory is what every model's trainer child
// starts from (the PyTorch worker, model kind hf) and what the built-in
// engines serve (model/transformer); it is served under its Hugging Face
// name with its tokenizer id, because that is what the SDK's get_tokenizer
// loads: TrainingClient.get_tokenizer calls get_info and passes
// model_data.tokenizer_id (else the model name) to
// AutoTokenizer.from_pretrained (thinking-machines-lab/tinker
// src/tinker/lib/public_interfaces/training_client.py @097e1089,
// _get_tokenizer); SamplingClient.get_tokenizer passes the sampler's
// base_model, cut at ":" (sampling_client.py @03c1fa7c,
// _load_tokenizer_from_model_info).

// hfBase is the served catalog entry, resolved.
type hfBase struct {
	entry config.TinkerBaseModel
	// field is the entry's config path, e.g. tinker.base_models[1].
	field string
	// dir is the checkpoint directory (given, or random-initialised).
	dir   string
	model *transformer.Model
	// created says dir was random-initialised by this start.
	created bool
}

// tokenizerID is get_info's model_data.tokenizer_id.
func (b *hfBase) tokenizerID() string {
	if b.entry.TokenizerID != "" {
		return b.entry.TokenizerID
	}
	return b.entry.Name
}

// resolveHFBase finds the served entry's checkpoint — or, with arch and no
// checkpoint at its path, random-initialises one there from run.seed (as
// `asyncrl model init`) — and loads it for the engines. nil without a
// catalog (the built-in policy). Every error names the entry's field, the
// directory and the fix; a directory that holds something else is never
// written over.
func resolveHFBase(c config.Config, t config.TinkerConfig, dataDir string) (*hfBase, error) {
	e := t.Served()
	if e == nil {
		return nil, nil
	}
	b := &hfBase{entry: *e}
	for i := range t.BaseModels {
		if t.BaseModels[i].Name == e.Name {
			b.field = fmt.Sprintf("tinker.base_models[%d]", i)
		}
	}
	preset := e.Preset
	if preset == "" {
		preset = config.PresetTiny
	}
	b.dir = e.Path
	if b.dir == "" {
		b.dir = filepath.Join(dataDir, "models", fmt.Sprintf("%s-%s-seed%d", e.Arch, preset, c.Run.Seed))
	}
	mt, err := transformer.ModelType(b.dir)
	switch {
	case err == nil && e.Arch != config.ArchNone && mt != string(e.Arch):
		return nil, fmt.Errorf("%s (%s): arch is %s but %s holds a %s checkpoint: point path elsewhere or drop arch", b.field, e.Name, e.Arch, b.dir, mt)
	case err == nil && !transformer.Supported(mt):
		return nil, fmt.Errorf("%s (%s): %s holds a %q checkpoint; the Tinker server serves %v (docs/models.md)", b.field, e.Name, b.dir, mt, transformer.Archs())
	case err != nil && e.Arch == config.ArchNone:
		return nil, fmt.Errorf("%s (%s): path %s: %w (give a Hugging Face checkpoint directory with config.json and model.safetensors, or arch and tokenizer to random-initialise one there)", b.field, e.Name, b.dir, err)
	case err != nil:
		if _, serr := os.Stat(filepath.Join(b.dir, transformer.ConfigFileName)); !errors.Is(serr, os.ErrNotExist) {
			return nil, fmt.Errorf("%s (%s): path %s: %w (fix or remove its config.json; it is not written over)", b.field, e.Name, b.dir, err)
		}
		// loaded back below: the engines serve exactly the BF16 file the
		// children train from
		if _, err = transformer.Create(transformer.CreateOptions{Arch: string(e.Arch), Preset: string(preset),
			Tokenizer: e.Tokenizer, Out: b.dir, Seed: uint64(c.Run.Seed)}); err != nil {
			return nil, fmt.Errorf("%s (%s): random-initialise %s %s into %s: %w", b.field, e.Name, e.Arch, preset, b.dir, err)
		}
		b.created = true
	}
	if b.model, err = transformer.Load(b.dir); err != nil {
		return nil, fmt.Errorf("%s (%s): %s is not a checkpoint the engines can serve: %w", b.field, e.Name, b.dir, err)
	}
	return b, nil
}

// hfExecBackend trains models of the Hugging Face base in trainer children
// of model kind hf (tinker.trainer exec; config validation refuses builtin):
// each child starts from the checkpoint directory itself, which is never
// written (the children write under <data_dir>/exec/models).
func hfExecBackend(t config.TinkerConfig, b *hfBase, dataDir string, log zerolog.Logger) Backend {
	return ExecBackend(&bridgetrain.Backend{
		Opts: bridgetrain.Options{Spec: bridge.Spec{Argv: t.TrainerExec, Env: t.TrainerExecEnv}, Base: b.dir, Kind: "hf",
			OutDir: filepath.Join(dataDir, "exec", "models"), Timeout: t.TrainerExecTimeout,
			Logger: log.With().Str("component", "tinker-trainer").Logger()},
		Vocab: b.model.VocabSize(), MaxLen: b.model.MaxSeqLen(), ArchName: string(b.model.Config().Arch), Tokenizer: b.tokenizerID(),
	})
}
