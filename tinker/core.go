package tinker

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// Sentinel errors of the core; the HTTP shell maps them to status codes.
var (
	ErrUnknownSession = errors.New("tinker: unknown session")
	ErrUnknownModel   = errors.New("tinker: unknown model")
	ErrUnknownSampler = errors.New("tinker: unknown sampling session")
	ErrConflict       = errors.New("tinker: seq_id reused with a different body")
	ErrQuota          = errors.New("tinker: quota exceeded")
	ErrExists         = errors.New("tinker: already exists")
)

// Kind says where a future's result lives: sample futures only in memory,
// training futures also in the durable store.
type Kind uint8

const (
	// KindSample is asample: in memory, bounded retention.
	KindSample Kind = iota + 1
	// KindTrain is every training-client call (create_model, forward,
	// forward_backward, optim_step, save/load weights, unload_model): the
	// shell persists it too.
	KindTrain
)

// Limits bounds the core's state (config.TinkerConfig).
type Limits struct {
	// SessionTimeout closes a session without a heartbeat for this long.
	SessionTimeout time.Duration
	// ResultTTL evicts a finished result this long after it finished.
	ResultTTL time.Duration
	// ResultMaxBytes bounds the bytes of finished results held; the oldest
	// are evicted first.
	ResultMaxBytes int64
	// MaxModelsPerSession and MaxPendingPerSession are per-session quotas.
	MaxModelsPerSession  int
	MaxPendingPerSession int
	// Tombstones is how many evicted ids are remembered to say why they
	// are gone (older ones become plain unknown ids).
	Tombstones int
}

// Session is one client session.
type Session struct {
	ID       string
	Created  time.Time
	LastBeat time.Time
	Models   map[string]bool
	Pending  int
}

// Model is a trained model (a LoRA on a base, in Tinker's terms).
type Model struct {
	ID        string
	SessionID string
	BaseModel string
	Rank      int
	Created   time.Time
	// TrainMLP, TrainAttn and TrainUnembed are the create_model request's
	// lora_config flags (absent = true), recorded with the model's
	// checkpoints for weights_info.
	TrainMLP, TrainAttn, TrainUnembed bool
}

// Sampler is a sampling session: base weights or a sampler checkpoint.
type Sampler struct {
	ID        string
	SessionID string
	BaseModel string
	ModelPath string
}

// Future is one request's future.
type Future struct {
	ID        string
	Kind      Kind
	SessionID string
	ModelID   string
	idemKey   string
	bodyHash  [32]byte
	Done      bool
	Failed    bool
	Result    []byte // the JSON body retrieve_future answers, encoded once
	Submitted time.Time
	Completed time.Time
}

// Submission asks for a new future. IdemKey ("<model or sampler>/<seq>")
// makes retries idempotent: the same key and body hash give the same
// future, another body ErrConflict.
type Submission struct {
	ID        string
	Kind      Kind
	SessionID string
	ModelID   string
	IdemKey   string
	BodyHash  [32]byte
}

type idemRec struct {
	id   string
	hash [32]byte
}

// View is what retrieve_future learns about an id.
type View struct {
	Found  bool
	Done   bool
	Failed bool
	Kind   Kind
	Result []byte
	// Gone is why a known id no longer has a result (evicted by TTL or
	// memory bound); empty when never known or still held.
	Gone string
}

// Expired is a session closed by Tick and the models it held.
type Expired struct {
	SessionID string
	Models    []string
}

// Core is the server's state: sessions with heartbeats, models, sampling
// sessions, futures with idempotent seq ids and bounded result retention.
// A pure core: time is an input, no locks (the shell serialises it), no I/O.
type Core struct {
	lim       Limits
	sessions  map[string]*Session
	models    map[string]*Model
	samplers  map[string]*Sampler
	futures   map[string]*Future
	idem      map[string]string
	done      []string // finished futures in completion order (eviction FIFO)
	doneHead  int
	doneBytes int64
	gone      map[string]string
	// trainIdem keeps the idempotency keys of training futures evicted
	// from memory (their results stay in the shell's durable store), per
	// model, until the model is unloaded: a late retry still gets its
	// original future, never a second run.
	trainIdem map[string]map[string]idemRec
	goneOrder []string
	goneHead  int
	evicted   int64
	// chunks is each model's last forward/forward_backward request, to
	// place the next one in its batch (batch.go).
	chunks map[string]chunkRec
}

// NewCore returns an empty core.
func NewCore(lim Limits) *Core {
	if lim.Tombstones <= 0 {
		lim.Tombstones = 1 << 18
	}
	return &Core{lim: lim, sessions: map[string]*Session{}, models: map[string]*Model{},
		samplers: map[string]*Sampler{}, futures: map[string]*Future{}, idem: map[string]string{},
		gone: map[string]string{}, trainIdem: map[string]map[string]idemRec{}, chunks: map[string]chunkRec{}}
}

// CreateSession opens session id.
func (c *Core) CreateSession(now time.Time, id string) (*Session, error) {
	if _, ok := c.sessions[id]; ok {
		return nil, fmt.Errorf("%w: session %q", ErrExists, id)
	}
	s := &Session{ID: id, Created: now, LastBeat: now, Models: map[string]bool{}}
	c.sessions[id] = s
	return s, nil
}

// Heartbeat keeps session id alive.
func (c *Core) Heartbeat(now time.Time, id string) error {
	s, ok := c.sessions[id]
	if !ok {
		return fmt.Errorf("%w %q (closed after %s without a heartbeat, or never created)", ErrUnknownSession, id, c.lim.SessionTimeout)
	}
	s.LastBeat = now
	return nil
}

// Session returns session id.
func (c *Core) Session(id string) (*Session, bool) { s, ok := c.sessions[id]; return s, ok }

// Sessions is the number of open sessions.
func (c *Core) Sessions() int { return len(c.sessions) }

// CreateModel registers model id in session sid (quota: MaxModelsPerSession).
func (c *Core) CreateModel(now time.Time, sid, id, base string, rank int) (*Model, error) {
	s, ok := c.sessions[sid]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownSession, sid)
	}
	if _, ok := c.models[id]; ok {
		return nil, fmt.Errorf("%w: model %q", ErrExists, id)
	}
	if len(s.Models) >= c.lim.MaxModelsPerSession {
		return nil, fmt.Errorf("%w: session %q holds %d models (max_models_per_session)", ErrQuota, sid, len(s.Models))
	}
	m := &Model{ID: id, SessionID: sid, BaseModel: base, Rank: rank, Created: now}
	c.models[id] = m
	s.Models[id] = true
	return m, nil
}

// Model returns model id.
func (c *Core) Model(id string) (*Model, error) {
	m, ok := c.models[id]
	if !ok {
		return nil, fmt.Errorf("%w %q (unloaded, its session timed out, or never created)", ErrUnknownModel, id)
	}
	return m, nil
}

// Models is the number of loaded models.
func (c *Core) Models() int { return len(c.models) }

// UnloadModel forgets model id.
func (c *Core) UnloadModel(id string) error {
	m, ok := c.models[id]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownModel, id)
	}
	delete(c.models, id)
	delete(c.trainIdem, id)
	delete(c.chunks, id)
	if s, ok := c.sessions[m.SessionID]; ok {
		delete(s.Models, id)
	}
	return nil
}

// CreateSampler registers a sampling session.
func (c *Core) CreateSampler(sp Sampler) error {
	if sp.SessionID != "" {
		if _, ok := c.sessions[sp.SessionID]; !ok {
			return fmt.Errorf("%w %q", ErrUnknownSession, sp.SessionID)
		}
	}
	if _, ok := c.samplers[sp.ID]; ok {
		return fmt.Errorf("%w: sampling session %q", ErrExists, sp.ID)
	}
	c.samplers[sp.ID] = &sp
	return nil
}

// Sampler returns sampling session id.
func (c *Core) Sampler(id string) (*Sampler, error) {
	s, ok := c.samplers[id]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownSampler, id)
	}
	return s, nil
}

// Submit creates a future, or returns the existing one for a retried
// (IdemKey, body) (dup true). A different body under the same key is
// ErrConflict; a session at MaxPendingPerSession is ErrQuota.
func (c *Core) Submit(now time.Time, sub Submission) (id string, dup bool, err error) {
	if sub.IdemKey != "" {
		if prev, ok := c.idem[sub.IdemKey]; ok {
			if f, ok := c.futures[prev]; ok && f.bodyHash != sub.BodyHash {
				return "", false, fmt.Errorf("%w: %s was already used by request %s", ErrConflict, sub.IdemKey, prev)
			}
			return prev, true, nil
		}
		if rec, ok := c.trainIdem[sub.ModelID][sub.IdemKey]; ok {
			if rec.hash != sub.BodyHash {
				return "", false, fmt.Errorf("%w: %s was already used by request %s", ErrConflict, sub.IdemKey, rec.id)
			}
			return rec.id, true, nil
		}
	}
	var s *Session
	if sub.SessionID != "" {
		s = c.sessions[sub.SessionID]
		if s != nil && s.Pending >= c.lim.MaxPendingPerSession {
			return "", false, fmt.Errorf("%w: session %q has %d unfinished futures (max_pending_per_session)", ErrQuota, sub.SessionID, s.Pending)
		}
	}
	if _, ok := c.futures[sub.ID]; ok {
		panic(fmt.Sprintf("tinker: future id %q reused", sub.ID))
	}
	c.futures[sub.ID] = &Future{ID: sub.ID, Kind: sub.Kind, SessionID: sub.SessionID, ModelID: sub.ModelID,
		idemKey: sub.IdemKey, bodyHash: sub.BodyHash, Submitted: now}
	if sub.IdemKey != "" {
		c.idem[sub.IdemKey] = sub.ID
	}
	if s != nil {
		s.Pending++
	}
	return sub.ID, false, nil
}

// Complete records id's result (failed: result is a RequestFailedResponse
// body) and evicts the oldest finished results beyond ResultMaxBytes. It
// reports false for an id that is unknown or already done.
func (c *Core) Complete(now time.Time, id string, result []byte, failed bool) bool {
	f, ok := c.futures[id]
	if !ok || f.Done {
		return false
	}
	f.Done, f.Failed, f.Result, f.Completed = true, failed, result, now
	if s, ok := c.sessions[f.SessionID]; ok && s.Pending > 0 {
		s.Pending--
	}
	c.done = append(c.done, id)
	c.doneBytes += int64(len(result))
	for c.doneBytes > c.lim.ResultMaxBytes && c.doneHead < len(c.done) {
		c.evictHead(fmt.Sprintf("evicted: finished results exceeded sample_result_max_bytes (%d bytes)", c.lim.ResultMaxBytes))
	}
	return true
}

// Lookup reports what is known of id.
func (c *Core) Lookup(id string) View {
	if f, ok := c.futures[id]; ok {
		return View{Found: true, Done: f.Done, Failed: f.Failed, Kind: f.Kind, Result: f.Result}
	}
	return View{Gone: c.gone[id]}
}

// Pending is the number of unfinished futures; Held the finished ones in
// memory and their bytes; Evicted the results evicted so far.
func (c *Core) Pending() int       { return len(c.futures) - (len(c.done) - c.doneHead) }
func (c *Core) Held() (int, int64) { return len(c.done) - c.doneHead, c.doneBytes }
func (c *Core) Evicted() int64     { return c.evicted }

func (c *Core) evictHead(reason string) {
	id := c.done[c.doneHead]
	c.done[c.doneHead] = ""
	c.doneHead++
	if c.doneHead > 1024 && c.doneHead*2 > len(c.done) {
		c.done = append([]string(nil), c.done[c.doneHead:]...)
		c.doneHead = 0
	}
	f := c.futures[id]
	if f == nil {
		return
	}
	delete(c.futures, id)
	c.doneBytes -= int64(len(f.Result))
	if f.idemKey != "" && c.idem[f.idemKey] == id {
		delete(c.idem, f.idemKey)
		if _, loaded := c.models[f.ModelID]; f.Kind == KindTrain && loaded {
			if c.trainIdem[f.ModelID] == nil {
				c.trainIdem[f.ModelID] = map[string]idemRec{}
			}
			c.trainIdem[f.ModelID][f.idemKey] = idemRec{id: id, hash: f.bodyHash}
		}
	}
	c.evicted++
	c.gone[id] = reason
	c.goneOrder = append(c.goneOrder, id)
	for len(c.goneOrder)-c.goneHead > c.lim.Tombstones {
		delete(c.gone, c.goneOrder[c.goneHead])
		c.goneOrder[c.goneHead] = ""
		c.goneHead++
	}
	if c.goneHead > 1024 && c.goneHead*2 > len(c.goneOrder) {
		c.goneOrder = append([]string(nil), c.goneOrder[c.goneHead:]...)
		c.goneHead = 0
	}
}

// Tick evicts results older than ResultTTL and closes sessions without a
// heartbeat for SessionTimeout, unloading their models (returned so the
// shell frees their weights).
func (c *Core) Tick(now time.Time) []Expired {
	for c.doneHead < len(c.done) {
		f := c.futures[c.done[c.doneHead]]
		if f != nil && now.Sub(f.Completed) < c.lim.ResultTTL {
			break
		}
		c.evictHead(fmt.Sprintf("evicted: finished more than sample_result_ttl (%s) ago", c.lim.ResultTTL))
	}
	var out []Expired
	for id, s := range c.sessions {
		if now.Sub(s.LastBeat) < c.lim.SessionTimeout {
			continue
		}
		e := Expired{SessionID: id}
		for m := range s.Models {
			delete(c.models, m)
			delete(c.trainIdem, m)
			delete(c.chunks, m)
			e.Models = append(e.Models, m)
		}
		for sid, sp := range c.samplers {
			if sp.SessionID == id {
				delete(c.samplers, sid)
			}
		}
		delete(c.sessions, id)
		slices.Sort(e.Models)
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SessionID < out[j].SessionID })
	return out
}
