package server

import (
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
	if exists(dir) && !req.Overwrite {
		return nil, httpErr(http.StatusConflict, "checkpoint %s exists (overwrite: true replaces it)", p)
	}
	return s.submitTrain("save_weights", req.ModelID, req.SeqID, "", body, func(t Trainer) (any, error) {
		_ = os.RemoveAll(dir)
		if err := t.SaveState(dir); err != nil {
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
	if named && exists(dir) {
		return nil, httpErr(http.StatusConflict, "sampler checkpoint %s exists", p)
	}
	s.mu.Lock()
	m, err := s.core.Model(req.ModelID)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.submitTrain("save_weights_for_sampler", req.ModelID, req.SeqID, "", body, func(t Trainer) (any, error) {
		_ = os.RemoveAll(dir)
		if err := t.SaveSampler(dir); err != nil {
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
