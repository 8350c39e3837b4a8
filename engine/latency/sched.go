package latency

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors.
var (
	ErrConfig    = errors.New("latency: invalid config")
	ErrQueueFull = errors.New("latency: waiting queue full")
	ErrTooLong   = errors.New("latency: request needs more KV blocks than the cache holds")
	ErrDuplicate = errors.New("latency: duplicate sequence id")
)

// Request is one sequence to schedule.
type Request struct {
	// ID names the sequence in Plans; unique among live sequences.
	ID uint64
	// Prompt is the prompt's token ids (the core keeps its own copy).
	Prompt []int32
	// MaxTokens bounds generation; used to reject a sequence that could
	// never fit the cache on its own.
	MaxTokens int
	// Salt separates prefix-cache keys of sequences that must not share
	// KV although their tokens match (e.g. different LoRA adapters).
	Salt uint64
}

// Emit is one token a step produces.
type Emit struct {
	ID uint64
	// First is true for the sequence's first generated token.
	First bool
	// SinceArrival is the modelled time from Add to the end of this step
	// (time-to-first-token when First).
	SinceArrival time.Duration
	// CachedTokens is the number of prompt tokens the sequence's latest
	// admission found in the prefix cache.
	CachedTokens int
}

// Plan is one engine step.
type Plan struct {
	// Emits lists every running sequence, in admission order; the caller
	// computes exactly one token for each and reports it with Append.
	Emits []Emit
	// Admitted counts sequences admitted (or re-admitted) this step.
	Admitted int
	// Preempted lists sequences moved back to the queue this step.
	Preempted []uint64
	// PrefillTokens is the number of prompt tokens computed this step
	// (misses); CachedTokens those reused from the prefix cache.
	PrefillTokens, CachedTokens int
	// Duration is the step's modelled cost.
	Duration time.Duration
}

// Stats are the counters a /metrics endpoint exposes.
type Stats struct {
	Running, Waiting int
	BlocksUsed       int
	CacheBlocks      int
	// KVUsage is BlocksUsed / CacheBlocks, in [0, 1].
	KVUsage float64
	// PrefixQueries and PrefixHits count prompt tokens looked up in, and
	// found in, the prefix cache at admission.
	PrefixQueries, PrefixHits int64
	// GenerationTokens counts Appended tokens.
	GenerationTokens int64
	Preemptions      int64
	Evictions        int64
	// Now is the modelled clock: the sum of all step durations.
	Now time.Duration
}

type seq struct {
	id       uint64
	salt     uint64
	tokens   []int32 // prompt then generated
	keys     []uint64
	blocks   []int32
	arrival  time.Duration
	produced int // tokens produced since arrival (not reset by preemption)
	cached   int // prompt tokens hit at the latest admission
	running  bool
}

// Scheduler is the modelled server. Not safe for concurrent use.
type Scheduler struct {
	cfg     Config
	pool    *blockPool
	seqs    map[uint64]*seq
	waiting []*seq // FIFO; index 0 is next
	running []*seq // admission order
	now     time.Duration
	queries int64
	hits    int64
	gen     int64
	preempt int64
	emits   []Emit
}

// New returns an idle scheduler. It panics on an invalid config: callers
// validate configs at their edge.
func New(cfg Config) *Scheduler {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	return &Scheduler{cfg: cfg, pool: newBlockPool(cfg.CacheBlocks), seqs: make(map[uint64]*seq)}
}

// Config returns the scheduler's config.
func (s *Scheduler) Config() Config { return s.cfg }

func (s *Scheduler) blocksFor(tokens int) int {
	return (tokens + s.cfg.BlockSize - 1) / s.cfg.BlockSize
}

// Add queues a request at the tail of the waiting queue.
func (s *Scheduler) Add(r Request) error {
	if _, dup := s.seqs[r.ID]; dup {
		return fmt.Errorf("%w: %d", ErrDuplicate, r.ID)
	}
	if need := s.blocksFor(len(r.Prompt) + r.MaxTokens); need > s.cfg.CacheBlocks {
		return fmt.Errorf("%w: %d tokens need %d blocks, cache has %d", ErrTooLong, len(r.Prompt)+r.MaxTokens, need, s.cfg.CacheBlocks)
	}
	if len(r.Prompt) == 0 {
		return fmt.Errorf("%w: empty prompt", ErrTooLong)
	}
	// Requests that the next step can seat are not "waiting" yet: only
	// those beyond the free seats count against MaxWaiting.
	if len(s.waiting)-max(0, s.cfg.MaxNumSeqs-len(s.running)) >= s.cfg.MaxWaiting {
		return ErrQueueFull
	}
	q := &seq{id: r.ID, salt: r.Salt, tokens: append([]int32(nil), r.Prompt...), arrival: s.now}
	s.seqs[r.ID] = q
	s.waiting = append(s.waiting, q)
	return nil
}

// Append records the token the caller computed for sequence id this step.
func (s *Scheduler) Append(id uint64, tok int32) {
	q := s.seqs[id]
	if q == nil || !q.running {
		panic(fmt.Sprintf("latency: Append to sequence %d that is not running", id))
	}
	q.tokens = append(q.tokens, tok)
	q.produced++
	s.gen++
}

// Finish ends sequence id (done, aborted or cancelled), waiting or running,
// and releases its blocks; their cached prefixes stay until evicted. An
// unknown id is ignored so that aborts race harmlessly with completion.
func (s *Scheduler) Finish(id uint64) {
	q := s.seqs[id]
	if q == nil {
		return
	}
	delete(s.seqs, id)
	if q.running {
		s.running = remove(s.running, q)
		s.free(q)
	} else {
		s.waiting = remove(s.waiting, q)
	}
}

func remove(list []*seq, q *seq) []*seq {
	for i, x := range list {
		if x == q {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

// free releases q's blocks, last block first, so that a request's tail
// (least likely to be shared) is evicted before its head.
func (s *Scheduler) free(q *seq) {
	for i := len(q.blocks) - 1; i >= 0; i-- {
		s.pool.release(q.blocks[i])
	}
	q.blocks = q.blocks[:0]
	q.keys = q.keys[:0]
	q.running = false
}

// publishFull keys every full block of q whose key is not yet computed.
func (s *Scheduler) publishFull(q *seq, upto int) {
	bs := s.cfg.BlockSize
	for i := len(q.keys); (i+1)*bs <= upto && i < len(q.blocks); i++ {
		prev := uint64(0)
		if i > 0 {
			prev = q.keys[i-1]
		}
		k := chainKey(prev, q.salt, q.tokens[i*bs:(i+1)*bs])
		q.keys = append(q.keys, k)
		s.pool.publish(q.blocks[i], k)
	}
}

// grow gives q blocks for n tokens; false when the cache is out of blocks.
func (s *Scheduler) grow(q *seq, n int) bool {
	for len(q.blocks) < s.blocksFor(n) {
		b, ok := s.pool.alloc()
		if !ok {
			return false
		}
		q.blocks = append(q.blocks, b)
	}
	return true
}

// Schedule plans the next step and advances the modelled clock by its
// duration. An empty plan (nothing running or admissible) costs nothing.
func (s *Scheduler) Schedule() Plan {
	var p Plan
	// 1. Room for every running sequence's tokens; preempt newest on need.
	for i := 0; i < len(s.running); i++ {
		q := s.running[i]
		for !s.grow(q, len(q.tokens)) {
			victim := s.running[len(s.running)-1]
			if len(s.running) == 1 {
				panic("latency: a lone sequence outgrew the cache (Add should have rejected it)")
			}
			s.running = s.running[:len(s.running)-1]
			s.free(victim)
			s.waiting = append([]*seq{victim}, s.waiting...)
			s.preempt++
			p.Preempted = append(p.Preempted, victim.id)
			if victim == q {
				break
			}
		}
	}
	// 2. Admit from the head of the queue while blocks and seats allow.
	bs := s.cfg.BlockSize
	for len(s.waiting) > 0 && len(s.running) < s.cfg.MaxNumSeqs {
		q := s.waiting[0]
		n := len(q.tokens)
		// Longest cached prefix, capped so at least one token is computed.
		var hitBlocks []int32
		prev := uint64(0)
		for i := 0; (i+1)*bs <= n-1; i++ {
			k := chainKey(prev, q.salt, q.tokens[i*bs:(i+1)*bs])
			b, ok := s.pool.lookup(k)
			if !ok {
				break
			}
			hitBlocks = append(hitBlocks, b)
			prev = k
		}
		// Hit blocks that sit unreferenced in the free queue are counted
		// in nFree but must not be evicted to make room for this request.
		reclaim := 0
		for _, b := range hitBlocks {
			if s.pool.blocks[b].ref == 0 {
				reclaim++
			}
		}
		need := s.blocksFor(n) - len(hitBlocks)
		if need > s.pool.nFree-reclaim {
			break // FIFO: the head waits for blocks
		}
		s.waiting = s.waiting[1:]
		for _, b := range hitBlocks {
			s.pool.acquire(b)
		}
		q.blocks = append(q.blocks[:0], hitBlocks...)
		if !s.grow(q, n) {
			panic("latency: admission accounting is wrong")
		}
		q.running = true
		s.running = append(s.running, q)
		s.publishFull(q, n)
		hit := len(hitBlocks) * bs
		q.cached = hit
		s.queries += int64(n)
		s.hits += int64(hit)
		p.CachedTokens += hit
		p.PrefillTokens += n - hit
		p.Admitted++
	}
	if len(s.running) == 0 {
		return p
	}
	// 3. Every running sequence computes its pending tokens and emits one.
	p.Duration = s.cfg.DecodeBase + time.Duration(len(s.running))*s.cfg.DecodePerSeq +
		time.Duration(p.PrefillTokens)*s.cfg.PrefillPerToken
	s.now += p.Duration
	s.emits = s.emits[:0]
	for _, q := range s.running {
		s.publishFull(q, len(q.tokens))
		s.emits = append(s.emits, Emit{ID: q.id, First: q.produced == 0, SinceArrival: s.now - q.arrival, CachedTokens: q.cached})
	}
	p.Emits = s.emits
	return p
}

// ResetPrefixCache forgets every cached prefix (e.g. after new weights
// made the cached KV stale). Blocks of running sequences stay allocated.
func (s *Scheduler) ResetPrefixCache() { s.pool.reset() }

// Now is the modelled clock.
func (s *Scheduler) Now() time.Duration { return s.now }

// SinceArrival is the modelled time since sequence id was added.
func (s *Scheduler) SinceArrival(id uint64) (time.Duration, bool) {
	q := s.seqs[id]
	if q == nil {
		return 0, false
	}
	return s.now - q.arrival, true
}

// Stats returns the current counters.
func (s *Scheduler) Stats() Stats {
	used := s.pool.used()
	return Stats{
		Running:          len(s.running),
		Waiting:          len(s.waiting),
		BlocksUsed:       used,
		CacheBlocks:      s.cfg.CacheBlocks,
		KVUsage:          float64(used) / float64(s.cfg.CacheBlocks),
		PrefixQueries:    s.queries,
		PrefixHits:       s.hits,
		GenerationTokens: s.gen,
		Preemptions:      s.preempt,
		Evictions:        s.pool.evicts,
		Now:              s.now,
	}
}
