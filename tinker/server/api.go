package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/asyncrl/asyncrl/tinker"
)

// routes lists every route under /api/v1/ (the SDK's resources/*.py and
// SkyRL's skyrl/tinker/api.py).
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	s.route(mux, "GET", "healthz", func(http.ResponseWriter, *http.Request, []byte) (any, error) {
		return map[string]string{"status": "ok"}, nil
	})
	s.route(mux, "GET", "get_server_capabilities", func(http.ResponseWriter, *http.Request, []byte) (any, error) {
		return map[string]any{"supported_models": []map[string]any{{"model_name": s.cfg.BaseModel, "max_context_length": s.cfg.Backend.MaxSeqLen()}}}, nil
	})
	s.route(mux, "POST", "client/config", func(http.ResponseWriter, *http.Request, []byte) (any, error) {
		// Serial chunks: tinker/batch.go. Models are created with
		// create_model, then loaded: weightsInfo.
		return tinker.ClientConfigResponse{}, nil
	})
	// client/dynamic_config: fetched by SDK 0.25.0 at start and every
	// refresh_interval_sec (InternalClientHolder
	// ._fetch_client_dynamic_config, POST {sdk_version}; d595dc2b). This
	// server has no flags that change while it runs; GET is served too.
	dynamic := func(http.ResponseWriter, *http.Request, []byte) (any, error) {
		return tinker.ClientDynamicConfigResponse{RefreshIntervalSec: 300}, nil
	}
	s.route(mux, "POST", "client/dynamic_config", dynamic)
	s.route(mux, "GET", "client/dynamic_config", dynamic)
	s.route(mux, "POST", "weights_info", s.weightsInfo)
	s.route(mux, "POST", "telemetry", func(http.ResponseWriter, *http.Request, []byte) (any, error) {
		return map[string]string{"status": "accepted"}, nil
	})
	s.route(mux, "POST", "create_session", s.createSession)
	s.route(mux, "POST", "session_heartbeat", s.heartbeat)
	s.route(mux, "POST", "create_model", s.createModel)
	s.route(mux, "POST", "get_info", s.getInfo)
	s.route(mux, "POST", "forward", s.forward)
	s.route(mux, "POST", "forward_backward", s.forwardBackward)
	s.route(mux, "POST", "optim_step", s.optimStep)
	s.route(mux, "POST", "save_weights", s.saveWeights)
	s.route(mux, "POST", "save_weights_for_sampler", s.saveForSampler)
	s.route(mux, "POST", "load_weights", s.loadWeights)
	s.route(mux, "POST", "unload_model", s.unloadModel)
	s.route(mux, "POST", "create_sampling_session", s.createSampler)
	s.route(mux, "GET", "samplers/{id}", s.getSampler)
	s.route(mux, "POST", "asample", s.asample)
	s.route(mux, "POST", "retrieve_future", s.retrieve)
	mux.Handle("GET /metrics", promHandler(s.cfg.Registry))
	mux.HandleFunc("/api/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, httpErr(http.StatusNotFound, "%s %s is not a route of this server (docs/tinker.md lists the supported ones)", r.Method, r.URL.Path))
	})
	return mux
}

func (s *Server) createSession(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	var req tinker.CreateSessionRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	id := newID("sess-")
	s.mu.Lock()
	_, err := s.core.CreateSession(s.now(), id)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s.log.Info().Str("session", id).Str("sdk_version", req.SDKVersion).Strs("tags", req.Tags).Msg("session created")
	return tinker.CreateSessionResponse{Type: "create_session", SessionID: id}, nil
}

func (s *Server) heartbeat(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	var req tinker.SessionRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.SessionID == "" {
		return nil, tinker.FieldErrors{{Loc: []any{"body", "session_id"}, Msg: "Field required", Type: "missing"}}
	}
	s.mu.Lock()
	err := s.core.Heartbeat(s.now(), req.SessionID)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return map[string]string{"type": "session_heartbeat"}, nil
}

// submitTrain creates a training future (idempotent by model and seq id),
// persists it as pending and queues run on the model's worker.
func (s *Server) submitTrain(op, modelID string, seq *int64, sessionID string, body []byte, run func(Trainer) (any, error)) (any, error) {
	return s.submitTrainChecked(op, modelID, seq, sessionID, body, nil, run)
}

// submitTrainChecked is submitTrain with a check that runs once the
// future is new (a retry of the same seq_id and body gets the original
// future without it): a check error fails the future at once with
// category "user" and run never runs. Refusing a request this way rather
// than with an HTTP error keeps the SDK's turn order moving — the SDK
// retries 408/409/429/5xx for up to 300 s (InternalClientHolder
// .execute_with_retries and _is_retryable_status_code, tinker 6b025363 and
// d595dc2b) and never sends the rest of a parallel batch after an HTTP
// error (tinker/batch.go) — and the SDK raises it as RequestFailedError
// with category User, the message kept.
func (s *Server) submitTrainChecked(op, modelID string, seq *int64, sessionID string, body []byte, check func() error, run func(Trainer) (any, error)) (any, error) {
	idem := ""
	if seq != nil {
		idem = modelID + "/" + strconv.FormatInt(*seq, 10)
	}
	s.mu.Lock()
	w := s.models[modelID]
	if s.closed.Load() {
		s.mu.Unlock()
		return nil, httpErr(http.StatusServiceUnavailable, "the server is shutting down")
	}
	if w == nil {
		s.mu.Unlock()
		return nil, httpErr(http.StatusNotFound, "unknown model_id %q (unloaded, its session timed out, or never created)", modelID)
	}
	if sessionID == "" {
		if m, err := s.core.Model(modelID); err == nil {
			sessionID = m.SessionID
		}
	}
	id, dup, err := s.core.Submit(s.now(), tinker.Submission{ID: newID("t-"), Kind: tinker.KindTrain, SessionID: sessionID,
		ModelID: modelID, IdemKey: idem, BodyHash: hash(body)})
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if dup {
		return tinker.UntypedAPIFuture{RequestID: id, ModelID: modelID}, nil
	}
	if check != nil {
		if err := check(); err != nil {
			s.finishTrain(id, op, modelID, nil, userError{err})
			return tinker.UntypedAPIFuture{RequestID: id, ModelID: modelID}, nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.store.put(ctx, id, record{State: "pending", Op: op, ModelID: modelID, At: s.now()}); err != nil {
		b, _ := json.Marshal(failure(err.Error(), "server"))
		s.complete(id, b, true)
		return nil, httpErr(http.StatusServiceUnavailable, "%v", err)
	}
	s.met.trainSubmitted.WithLabelValues(op).Inc()
	j := job{
		run: func(t Trainer) {
			out, err := run(t)
			s.finishTrain(id, op, modelID, out, err)
		},
		fail: func(err error) { s.finishTrain(id, op, modelID, nil, err) },
	}
	if !w.enqueue(j) {
		j.fail(fmt.Errorf("model %s was unloaded before this request ran", modelID))
	}
	return tinker.UntypedAPIFuture{RequestID: id, ModelID: modelID}, nil
}

// finishTrain stores a training result durably, then in memory.
func (s *Server) finishTrain(id, op, modelID string, out any, err error) {
	var body []byte
	state := "done"
	if err != nil {
		cat := "server"
		if _, ok := err.(userError); ok {
			cat = "user"
		}
		body, _ = json.Marshal(failure(err.Error(), cat))
		state = "failed"
	} else if body, err = json.Marshal(out); err != nil {
		body, _ = json.Marshal(failure("encoding the result: "+err.Error(), "server"))
		state = "failed"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if perr := s.store.put(ctx, id, record{State: state, Op: op, ModelID: modelID, Result: body, At: s.now()}); perr != nil {
		s.log.Error().Err(perr).Str("request_id", id).Msg("training future result not persisted; it is answerable until this process stops")
	}
	s.met.trainDone.WithLabelValues(op, state).Inc()
	s.complete(id, body, state == "failed")
}

// userError marks a failure caused by the request (category "user").
type userError struct{ error }

func (s *Server) createModel(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	var req tinker.CreateModelRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := tinker.ValidateCreateModel(&req, s.cfg.Tinker.MaxLoRARank); err != nil {
		return nil, err
	}
	if req.BaseModel != s.cfg.BaseModel {
		return nil, tinker.FieldErrors{{Loc: []any{"body", "base_model"}, Type: "value_error",
			Msg: fmt.Sprintf("base model %q is not served; get_server_capabilities lists %q", req.BaseModel, s.cfg.BaseModel)}}
	}
	modelID := newID("m-")
	s.mu.Lock()
	m, err := s.core.CreateModel(s.now(), req.SessionID, modelID, req.BaseModel, req.LoraConfig.Rank)
	if err == nil {
		lc := req.LoraConfig
		m.TrainMLP, m.TrainAttn, m.TrainUnembed = orTrue(lc.TrainMLP), orTrue(lc.TrainAttn), orTrue(lc.TrainUnembed)
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var seed int64
	if req.LoraConfig.Seed != nil {
		seed = *req.LoraConfig.Seed
	}
	t, err := s.cfg.Backend.NewModel(req.LoraConfig.Rank, seed)
	if err != nil {
		s.mu.Lock()
		_ = s.core.UnloadModel(modelID)
		s.mu.Unlock()
		return nil, err
	}
	s.mu.Lock()
	s.models[modelID] = newModelWorker(t)
	s.mu.Unlock()
	s.log.Info().Str("model", modelID).Str("session", req.SessionID).Int("rank", req.LoraConfig.Rank).Msg("model created")
	return s.submitTrain("create_model", modelID, nil, req.SessionID, body, func(Trainer) (any, error) {
		return map[string]string{"model_id": modelID}, nil
	})
}

// orTrue reads an optional lora_config flag (types/lora_config.py: true).
func orTrue(b *bool) bool { return b == nil || *b }

func (s *Server) getInfo(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	var req tinker.ModelRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	s.mu.Lock()
	m, err := s.core.Model(req.ModelID)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return tinker.GetInfoResponse{Type: "get_info", ModelID: m.ID, IsLoRA: true, LoRARank: m.Rank, ModelName: m.BaseModel,
		ModelData: tinker.ModelData{Arch: s.cfg.Backend.Arch(), ModelName: m.BaseModel, TokenizerID: s.cfg.Backend.TokenizerID()}}, nil
}

func (s *Server) fwdbwd(body []byte, backward bool) (any, error) {
	if backward {
		var req tinker.ForwardBackwardRequest
		if err := decode(body, &req); err != nil {
			return nil, err
		}
		return s.submitFwdBwd("forward_backward", "forward_backward_input", req.ModelID, req.SeqID, req.ForwardBackwardInput, body)
	}
	var req tinker.ForwardRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	return s.submitFwdBwd("forward", "forward_input", req.ModelID, req.SeqID, req.ForwardInput, body)
}

// submitFwdBwd submits a decoded forward (op "forward") or
// forward_backward request; body is what idempotency hashes. A request
// without a model, seq_id or input is a 422; bad data in it fail its
// future (category "user") naming each datum by its index in the SDK's
// whole batch, and the batch's later requests fail too (tinker/batch.go).
func (s *Server) submitFwdBwd(op, field, modelID string, seq *int64, in *tinker.ForwardBackwardInput, body []byte) (any, error) {
	vocab, maxLen := s.cfg.Backend.VocabSize(), s.cfg.Backend.MaxSeqLen()
	if modelID == "" || seq == nil || *seq < 0 || in == nil {
		return nil, tinker.ValidateFwdBwd(modelID, seq, in, field, vocab)
	}
	var bad tinker.FieldErrors
	if err := tinker.ValidateFwdBwd(modelID, seq, in, field, vocab); err != nil && !errors.As(err, &bad) {
		return nil, err
	}
	for i, d := range in.Data {
		if n := len(d.ModelInput.Tokens()); n > maxLen {
			bad = append(bad, tinker.FieldError{Loc: []any{"body", field, "data", i, "model_input"}, Type: "value_error",
				Msg: fmt.Sprintf("%d tokens exceed the model's context of %d", n, maxLen)})
		}
	}
	st := tinker.ChunkStatsOf(*seq, op, in)
	check := func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		pos := s.core.PlaceChunk(modelID, st)
		if len(bad) > 0 {
			msg, first := tinker.InBatch(bad, pos, *seq)
			if first < 0 {
				first = pos.Offset
			}
			s.core.RefuseChunk(modelID, *seq, first)
			return fmt.Errorf("%s refused: %s", op, msg)
		}
		if pos.Refused >= 0 {
			return fmt.Errorf("%s not run: data[%d] of its batch (the SDK's chunks from seq_id %d) was refused in the request with seq_id %d, so nothing of the batch after it trains; fix that datum and send the batch again",
				op, pos.Refused, pos.StartSeq, pos.RefusedSeq)
		}
		return nil
	}
	backward := op == "forward_backward"
	return s.submitTrainChecked(op, modelID, seq, "", body, check, func(t Trainer) (any, error) {
		return t.ForwardBackward(in, backward)
	})
}

func (s *Server) forward(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	return s.fwdbwd(body, false)
}

func (s *Server) forwardBackward(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	return s.fwdbwd(body, true)
}

func (s *Server) optimStep(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	var req tinker.OptimStepRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := tinker.ValidateOptim(&req); err != nil {
		return nil, err
	}
	p := *req.AdamParams
	return s.submitTrain("optim_step", req.ModelID, req.SeqID, "", body, func(t Trainer) (any, error) {
		m, err := t.OptimStep(p)
		if err != nil {
			return nil, err
		}
		return tinker.OptimStepResponse{Metrics: m}, nil
	})
}

func (s *Server) unloadModel(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	var req tinker.ModelRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	s.mu.Lock()
	w := s.models[req.ModelID]
	s.mu.Unlock()
	if w == nil {
		return nil, httpErr(http.StatusNotFound, "unknown model_id %q", req.ModelID)
	}
	return s.submitTrain("unload_model", req.ModelID, nil, "", body, func(Trainer) (any, error) {
		s.mu.Lock()
		_ = s.core.UnloadModel(req.ModelID)
		delete(s.models, req.ModelID)
		s.mu.Unlock()
		// After this job: requests queued behind it fail.
		go w.close(fmt.Errorf("model %s was unloaded", req.ModelID))
		return map[string]string{"model_id": req.ModelID, "type": "unload_model"}, nil
	})
}
