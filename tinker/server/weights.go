package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/asyncrl/asyncrl/tinker"
)

// tinker:// paths: tinker://<model_id>/weights/<name> (training state) and
// tinker://<model_id>/sampler_weights/<name> (serving weights), as the SDK
// (types/checkpoint.py) parses them. SkyRL's server also answers sampler
// paths as tinker://<model_id>/<name>; those are accepted on input.

type ckptPath struct {
	Model, Kind, Name string
}

func (p ckptPath) String() string { return "tinker://" + p.Model + "/" + p.Kind + "/" + p.Name }

func parsePath(s string) (ckptPath, error) {
	rest, ok := strings.CutPrefix(s, "tinker://")
	if !ok {
		return ckptPath{}, fmt.Errorf("path %q is not a tinker:// path", s)
	}
	parts := strings.Split(rest, "/")
	var p ckptPath
	switch len(parts) {
	case 2:
		p = ckptPath{Model: parts[0], Kind: "sampler_weights", Name: parts[1]}
	case 3:
		p = ckptPath{Model: parts[0], Kind: parts[1], Name: parts[2]}
	default:
		return ckptPath{}, fmt.Errorf("path %q is not tinker://<model_id>/weights/<name> or tinker://<model_id>/sampler_weights/<name>", s)
	}
	if p.Kind != "weights" && p.Kind != "sampler_weights" {
		return ckptPath{}, fmt.Errorf("path %q: kind %q is neither weights nor sampler_weights", s, p.Kind)
	}
	if !tinker.ValidName(p.Name) || !tinker.ValidName(p.Model) {
		return ckptPath{}, fmt.Errorf("path %q: names must match ^[A-Za-z0-9_-]+$", s)
	}
	return p, nil
}

func (s *Server) dir(p ckptPath) string {
	return filepath.Join(s.cfg.DataDir, "checkpoints", p.Model, p.Kind, p.Name)
}

// exists reports a finished checkpoint (its commit marker written last).
func exists(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, ".complete"))
	return err == nil
}

func commit(dir string) error {
	return os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644)
}

func badField(field, msg string) tinker.FieldErrors {
	return tinker.FieldErrors{{Loc: []any{"body", field}, Msg: msg, Type: "value_error"}}
}

func (s *Server) saveWeights(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	var req tinker.SaveWeightsRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.SeqID == nil {
		return nil, tinker.FieldErrors{{Loc: []any{"body", "seq_id"}, Msg: "Field required", Type: "missing"}}
	}
	if !tinker.ValidName(req.Path) {
		return nil, badField("path", fmt.Sprintf("name %q must match ^[A-Za-z0-9_-]+$", req.Path))
	}
	p := ckptPath{Model: req.ModelID, Kind: "weights", Name: req.Path}
	dir := s.dir(p)
	// An existing name is checked when the save runs, in the model's
	// order, after idempotency (a late retry of a finished save gets its
	// original future), and refused as a failed future (category user),
	// never a 409 the SDK would retry for 300 s (submitTrainChecked).
	return s.submitTrain("save_weights", req.ModelID, req.SeqID, "", body, func(t Trainer) (any, error) {
		if exists(dir) && !req.Overwrite {
			return nil, userError{fmt.Errorf("checkpoint %s exists: save under another name, or with overwrite=True to replace it", p)}
		}
		_ = os.RemoveAll(dir)
		if err := t.SaveState(dir); err != nil {
			return nil, err
		}
		if err := s.writeMeta(req.ModelID, dir); err != nil {
			return nil, err
		}
		if err := commit(dir); err != nil {
			return nil, err
		}
		return map[string]string{"path": p.String(), "type": "save_weights"}, nil
	})
}

func (s *Server) saveForSampler(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	var req tinker.SaveWeightsForSamplerRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.SeqID == nil {
		return nil, tinker.FieldErrors{{Loc: []any{"body", "seq_id"}, Msg: "Field required", Type: "missing"}}
	}
	named := req.Path != nil && *req.Path != ""
	if !named && req.SamplingSessionSeqID == nil {
		return nil, badField("path", "one of path or sampling_session_seq_id is required")
	}
	name := ""
	if named {
		name = *req.Path
		if !tinker.ValidName(name) {
			return nil, badField("path", fmt.Sprintf("name %q must match ^[A-Za-z0-9_-]+$", name))
		}
	} else {
		name = fmt.Sprintf("ss%d-%s", *req.SamplingSessionSeqID, newID("")[:8])
	}
	p := ckptPath{Model: req.ModelID, Kind: "sampler_weights", Name: name}
	dir := s.dir(p)
	s.mu.Lock()
	m, err := s.core.Model(req.ModelID)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.submitTrain("save_weights_for_sampler", req.ModelID, req.SeqID, "", body, func(t Trainer) (any, error) {
		if named && exists(dir) { // as save_weights: after idempotency, a failed future
			return nil, userError{fmt.Errorf("sampler checkpoint %s exists: save under another name", p)}
		}
		_ = os.RemoveAll(dir)
		if err := t.SaveSampler(dir); err != nil {
			return nil, err
		}
		if err := s.writeMeta(req.ModelID, dir); err != nil {
			return nil, err
		}
		if err := commit(dir); err != nil {
			return nil, err
		}
		// The engines load the checkpoint now, so sampling from it right
		// after the future completes never waits for (or misses) weights.
		if err := s.publishSampler(p, dir); err != nil {
			return nil, err
		}
		if named {
			return map[string]string{"path": p.String(), "type": "save_weights_for_sampler"}, nil
		}
		sid := newID("samp-")
		s.mu.Lock()
		err := s.core.CreateSampler(tinker.Sampler{ID: sid, SessionID: m.SessionID, BaseModel: m.BaseModel, ModelPath: p.String()})
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return map[string]string{"sampling_session_id": sid, "path": p.String(), "type": "save_weights_for_sampler"}, nil
	})
}

func (s *Server) loadWeights(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	var req tinker.LoadWeightsRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.ModelID == "" {
		// The create-via-load addressing (session_id + model_seq_id) is
		// sent only when client/config says create_model_via_load_weights,
		// which this server never does.
		return nil, tinker.FieldErrors{{Loc: []any{"body", "model_id"}, Type: "missing",
			Msg: "Field required: this server creates models with create_model, then load_weights on them (client/config create_model_via_load_weights is false)"}}
	}
	if req.SeqID == nil {
		return nil, tinker.FieldErrors{{Loc: []any{"body", "seq_id"}, Msg: "Field required", Type: "missing"}}
	}
	p, err := parsePath(req.Path)
	if err != nil {
		return nil, badField("path", err.Error())
	}
	if p.Kind != "weights" {
		return nil, badField("path", fmt.Sprintf("%s holds sampler weights only; load_weights needs a tinker://<model>/weights/<name> checkpoint", p))
	}
	dir := s.dir(p)
	if !exists(dir) {
		return nil, httpErr(http.StatusNotFound, "checkpoint %s not found", p)
	}
	opt := req.Optimizer
	return s.submitTrain("load_weights", req.ModelID, req.SeqID, "", body, func(t Trainer) (any, error) {
		if err := t.LoadState(dir, opt); err != nil {
			return nil, userError{err}
		}
		return map[string]string{"path": p.String(), "model_id": req.ModelID, "type": "load_weights"}, nil
	})
}

// metaFile is what a checkpoint records of the model that saved it, for
// weights_info: the SDK creates the resumed model from it.
const metaFile = "tinker_model.json"

type ckptMeta struct {
	ModelID      string `json:"model_id"`
	BaseModel    string `json:"base_model"`
	LoRARank     int    `json:"lora_rank"`
	TrainMLP     bool   `json:"train_mlp"`
	TrainAttn    bool   `json:"train_attn"`
	TrainUnembed bool   `json:"train_unembed"`
}

func metaOf(m *tinker.Model) ckptMeta {
	return ckptMeta{ModelID: m.ID, BaseModel: m.BaseModel, LoRARank: m.Rank, TrainMLP: m.TrainMLP, TrainAttn: m.TrainAttn, TrainUnembed: m.TrainUnembed}
}

func (s *Server) writeMeta(modelID, dir string) error {
	s.mu.Lock()
	m, err := s.core.Model(modelID)
	var meta ckptMeta
	if err == nil {
		meta = metaOf(m)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	b, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(dir, metaFile), b, 0o644); err != nil {
		return fmt.Errorf("recording the checkpoint's model: %w", err)
	}
	return nil
}

// weightsInfo is weights_info: what ServiceClient
// .create_training_client_from_state(_with_optimizer) asks of a saved
// path before it creates the model (create_model with base_model,
// lora_config rank and train_* flags) and loads it (load_weights with the
// new model's first seq_id, optimizer false or true) —
// src/tinker/lib/public_interfaces/service_client.py, tinker 6b025363
// (0.24.1) and d595dc2b (0.25.0), with client/config
// create_model_via_load_weights false. An unknown or unreadable path is a
// 404 the SDK does not retry.
func (s *Server) weightsInfo(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	var req tinker.WeightsInfoRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.TinkerPath == "" {
		return nil, tinker.FieldErrors{{Loc: []any{"body", "tinker_path"}, Msg: "Field required", Type: "missing"}}
	}
	p, err := parsePath(req.TinkerPath)
	if err != nil {
		return nil, badField("tinker_path", err.Error())
	}
	dir := s.dir(p)
	if !exists(dir) {
		return nil, httpErr(http.StatusNotFound, "checkpoint %s not found (save_state names it tinker://<model_id>/weights/<name>)", p)
	}
	var meta ckptMeta
	b, err := os.ReadFile(filepath.Join(dir, metaFile))
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &meta); err != nil {
			return nil, httpErr(http.StatusNotFound, "checkpoint %s: %s is unreadable (%v): create a model and load_state it", p, metaFile, err)
		}
	case errors.Is(err, os.ErrNotExist):
		// Saved before checkpoints recorded their model: its model may
		// still be loaded.
		s.mu.Lock()
		m, merr := s.core.Model(p.Model)
		if merr == nil {
			meta = metaOf(m)
		}
		s.mu.Unlock()
		if merr != nil {
			return nil, httpErr(http.StatusNotFound, "checkpoint %s does not record its model (saved by an older server) and model %s is not loaded: create a model with its rank and load_state the path", p, p.Model)
		}
	default:
		return nil, httpErr(http.StatusInternalServerError, "checkpoint %s: %v", p, err)
	}
	rank := meta.LoRARank
	return tinker.WeightsInfoResponse{BaseModel: meta.BaseModel, IsLoRA: true, LoRARank: &rank,
		TrainMLP: &meta.TrainMLP, TrainAttn: &meta.TrainAttn, TrainUnembed: &meta.TrainUnembed}, nil
}
