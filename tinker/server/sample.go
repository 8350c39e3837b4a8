package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/internal/netx"
	"github.com/asyncrl/asyncrl/tinker"
)

func adapterName(p ckptPath) string { return "tinker-" + p.Model + "-" + p.Name }

func (s *Server) createSampler(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	var req tinker.CreateSamplingSessionRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if req.SessionID == "" {
		return nil, tinker.FieldErrors{{Loc: []any{"body", "session_id"}, Msg: "Field required", Type: "missing"}}
	}
	sp := tinker.Sampler{ID: newID("samp-"), SessionID: req.SessionID, BaseModel: s.cfg.BaseModel}
	switch {
	case req.ModelPath != nil && *req.ModelPath != "":
		if _, _, err := s.resolve(*req.ModelPath); err != nil {
			return nil, err
		}
		sp.ModelPath = *req.ModelPath
	case req.BaseModel != nil && *req.BaseModel != "":
		if *req.BaseModel != s.cfg.BaseModel {
			return nil, badField("base_model", fmt.Sprintf("base model %q is not served (%q is)", *req.BaseModel, s.cfg.BaseModel))
		}
	default:
		return nil, badField("model_path", "one of model_path or base_model is required")
	}
	s.mu.Lock()
	err := s.core.CreateSampler(sp)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return map[string]string{"sampling_session_id": sp.ID, "type": "create_sampling_session"}, nil
}

func (s *Server) getSampler(_ http.ResponseWriter, r *http.Request, _ []byte) (any, error) {
	s.mu.Lock()
	sp, err := s.core.Sampler(r.PathValue("id"))
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := map[string]any{"sampler_id": sp.ID, "base_model": sp.BaseModel}
	if sp.ModelPath != "" {
		out["model_path"] = sp.ModelPath
	}
	return out, nil
}

// resolve maps a sampler model path to the engine model name serving it,
// loading the checkpoint on the engines first if needed.
func (s *Server) resolve(path string) (string, ckptPath, error) {
	p, err := parsePath(path)
	if err != nil {
		return "", p, badField("model_path", err.Error())
	}
	if p.Kind != "sampler_weights" {
		return "", p, badField("model_path", fmt.Sprintf("%s is a training checkpoint; sample from a save_weights_for_sampler path", p))
	}
	dir := s.dir(p)
	if !exists(dir) {
		return "", p, httpErr(http.StatusNotFound, "sampler checkpoint %s not found", p)
	}
	if s.versionMode() {
		name, err := s.versionModel(p)
		return name, p, err
	}
	name := adapterName(p)
	if err := s.ensureAdapter(name, dir, false); err != nil {
		return "", p, httpErr(http.StatusBadGateway, "loading %s on the engines: %v", p, err)
	}
	return name, p, nil
}

func (s *Server) asample(_ http.ResponseWriter, _ *http.Request, body []byte) (any, error) {
	var req tinker.SampleRequest
	if err := decode(body, &req); err != nil {
		return nil, err
	}
	if err := tinker.ValidateSample(&req, s.cfg.Backend.VocabSize(), s.cfg.Backend.MaxSeqLen()); err != nil {
		return nil, err
	}
	stop, _ := tinker.StopList(req.SamplingParams.Stop)
	if len(stop.Tokens) > 0 {
		return nil, badField("sampling_params", "stop token ids are not supported (the engines' completions API takes stop strings); pass strings")
	}
	model, session, idem, key := s.cfg.BaseModel, "", "", ""
	path := ""
	if req.SamplingSessionID != nil {
		s.mu.Lock()
		sp, err := s.core.Sampler(*req.SamplingSessionID)
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		session, path, key = sp.SessionID, sp.ModelPath, sp.ID
		idem = sp.ID + "/" + strconv.FormatInt(*req.SeqID, 10)
	} else if req.ModelPath != nil {
		path = *req.ModelPath
	} else if *req.BaseModel != s.cfg.BaseModel {
		return nil, badField("base_model", fmt.Sprintf("base model %q is not served (%q is)", *req.BaseModel, s.cfg.BaseModel))
	}
	if path != "" {
		name, _, err := s.resolve(path)
		if err != nil {
			return nil, err
		}
		model = name
	}
	if s.closed.Load() {
		return nil, httpErr(http.StatusServiceUnavailable, "the server is shutting down")
	}
	if !s.samples.reserve() {
		s.met.samplesRefused.Inc()
		return nil, httpErr(http.StatusTooManyRequests, "sample queue full (tinker.sample_queue = %d); retry later", s.cfg.Tinker.SampleQueue)
	}
	s.mu.Lock()
	id, dup, err := s.core.Submit(s.now(), tinker.Submission{ID: newID("s-"), Kind: tinker.KindSample, SessionID: session, IdemKey: idem, BodyHash: hash(body)})
	s.mu.Unlock()
	if err != nil || dup {
		s.samples.release()
		if err != nil {
			return nil, err
		}
		return tinker.UntypedAPIFuture{RequestID: id}, nil
	}
	n := 1
	if req.NumSamples != nil {
		n = *req.NumSamples
	}
	s.samples.jobs <- &sampleJob{id: id, session: key, req: engineRequest{Model: model, Prompt: req.Prompt.Tokens(), MaxTokens: *req.SamplingParams.MaxTokens,
		N: n, Temperature: req.SamplingParams.Temperature, TopP: req.SamplingParams.TopP, TopK: req.SamplingParams.TopK,
		Seed: req.SamplingParams.Seed, Stop: stop.Strings, ReturnTokenIDs: true}}
	return tinker.UntypedAPIFuture{RequestID: id}, nil
}

// engineRequest is the vLLM /v1/completions body (reference/vllm-api.md).
type engineRequest struct {
	Model          string   `json:"model"`
	Prompt         []int32  `json:"prompt"`
	MaxTokens      int      `json:"max_tokens"`
	N              int      `json:"n"`
	Temperature    *float64 `json:"temperature,omitempty"`
	TopP           *float64 `json:"top_p,omitempty"`
	TopK           *int     `json:"top_k,omitempty"`
	Seed           *int64   `json:"seed,omitempty"`
	Stop           []string `json:"stop,omitempty"`
	ReturnTokenIDs bool     `json:"return_token_ids"`
	Logprobs       int      `json:"logprobs"`
}

// engineResponse is the part of a completion the server reads: vLLM's
// token_ids (return_token_ids) and asyncrl's output_logprobs.
type engineResponse struct {
	Choices []struct {
		TokenIDs       []int32   `json:"token_ids"`
		OutputLogprobs []float32 `json:"output_logprobs"`
		Logprobs       *struct {
			TokenLogprobs []float32 `json:"token_logprobs"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

type sampleJob struct {
	id string
	// session is the sampling session id, the router's sticky key ("" for
	// a sample without one: the router places it by load alone).
	session string
	req     engineRequest
}

// samplePool bounds the server → engine side: at most sem's capacity
// requests queued or running, and a fixed number of workers calling the
// engines through the server's router (route.go), so in-flight futures
// never hold sockets.
type samplePool struct {
	s       *Server
	sem     chan struct{}
	jobs    chan *sampleJob
	client  *http.Client
	wg      sync.WaitGroup
	stopped chan struct{}
}

func newSamplePool(s *Server, queue, workers int) *samplePool {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = workers + 16
	tr.MaxIdleConnsPerHost = workers + 16
	p := &samplePool{s: s, sem: make(chan struct{}, queue), jobs: make(chan *sampleJob, queue),
		client: &http.Client{Transport: netx.KeyTransport(tr, s.cfg.EngineAPIKey, nil), Timeout: 10 * time.Minute}, stopped: make(chan struct{})}
	for range workers {
		p.wg.Add(1)
		go p.work()
	}
	return p
}

func (p *samplePool) reserve() bool {
	select {
	case p.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (p *samplePool) release() { <-p.sem }

func (p *samplePool) queued() int { return len(p.sem) }

func (p *samplePool) close() {
	select {
	case <-p.stopped:
		return
	default:
	}
	close(p.stopped)
	p.wg.Wait()
	// Jobs never started: fail them so none is silently lost.
	for {
		select {
		case j := <-p.jobs:
			b, _ := json.Marshal(failure("the server stopped before this sample ran", "server"))
			p.s.complete(j.id, b, true)
		default:
			return
		}
	}
}

func (p *samplePool) work() {
	defer p.wg.Done()
	buf := new(bytes.Buffer)
	for {
		select {
		case <-p.stopped:
			return
		case j := <-p.jobs:
			body, failed := p.run(j, buf)
			p.release()
			p.s.met.samplesDone.WithLabelValues(strconv.FormatBool(!failed)).Inc()
			p.s.complete(j.id, body, failed)
		}
	}
}

// errNoReplica marks the router's own 503 (no replica could take the
// request), as opposed to an engine's.
var errNoReplica = errors.New("no engine available")

// run sends the request to the router (which retries on another replica
// after a refused connection or a 503), once more after a transport error
// reaching the router itself, waits up to tinker.sample_engine_wait while
// the router has no replica for it (an engine that is restarting or still
// loading delays samples rather than failing them), and encodes the
// SampleResponse once.
func (p *samplePool) run(j *sampleJob, buf *bytes.Buffer) ([]byte, bool) {
	var lastErr error
	deadline := time.Now().Add(p.s.cfg.Tinker.SampleEngineWait)
	wait := 100 * time.Millisecond
	for try := 0; ; try++ {
		out, retry, err := p.call(p.s.routerURL, j, buf)
		if err == nil {
			b, _ := json.Marshal(out)
			return b, false
		}
		lastErr = err
		if errors.Is(err, errNoReplica) && time.Now().Before(deadline) {
			select {
			case <-p.stopped:
			case <-time.After(wait):
				wait = min(2*wait, 2*time.Second)
				continue
			}
		}
		if !retry || try >= 1 {
			break
		}
	}
	b, _ := json.Marshal(failure(lastErr.Error(), "server"))
	return b, true
}

func (p *samplePool) call(router string, j *sampleJob, buf *bytes.Buffer) (tinker.SampleResponse, bool, error) {
	buf.Reset()
	_ = json.NewEncoder(buf).Encode(&j.req)
	req, _ := http.NewRequest(http.MethodPost, router+"/v1/completions", bytes.NewReader(buf.Bytes()))
	req.Header.Set("Content-Type", "application/json")
	if j.session != "" {
		req.Header.Set("X-Session-ID", j.session)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return tinker.SampleResponse{}, true, fmt.Errorf("router %s: %w", router, err)
	}
	defer resp.Body.Close()
	// The engine that answered (the router's X-Asyncrl-Replica) names it
	// in errors; before one answered, the router does.
	url := resp.Header.Get("X-Asyncrl-Replica")
	if url == "" {
		url = "router " + router
	}
	if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("X-Asyncrl-Replica") == "" {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return tinker.SampleResponse{}, false, fmt.Errorf("%w: %s answered 503: %s (tinker.sample_engine_wait %s)", errNoReplica, url, bytes.TrimSpace(msg), p.s.cfg.Tinker.SampleEngineWait)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return tinker.SampleResponse{}, resp.StatusCode >= 500 || resp.StatusCode == 429,
			fmt.Errorf("%s answered %d: %s", url, resp.StatusCode, bytes.TrimSpace(msg))
	}
	var er engineResponse
	if err := json.NewDecoder(resp.Body).Decode(&er); err != nil {
		return tinker.SampleResponse{}, true, fmt.Errorf("%s: decoding the completion: %w", url, err)
	}
	out := tinker.SampleResponse{Type: "sample", Sequences: make([]tinker.SampledSequence, 0, len(er.Choices))}
	for _, c := range er.Choices {
		lp := c.OutputLogprobs
		if lp == nil && c.Logprobs != nil {
			lp = c.Logprobs.TokenLogprobs
		}
		stop := "length"
		if c.FinishReason != nil && *c.FinishReason == "stop" {
			stop = "stop"
		}
		if len(lp) != len(c.TokenIDs) {
			return tinker.SampleResponse{}, false, fmt.Errorf("%s returned %d tokens but %d logprobs", url, len(c.TokenIDs), len(lp))
		}
		out.Sequences = append(out.Sequences, tinker.SampledSequence{StopReason: stop, Tokens: c.TokenIDs, Logprobs: lp})
	}
	return out, false, nil
}
