package engine

import (
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/engine/latency"
	"github.com/asyncrl/asyncrl/model/sampler"
)

// loop is the batching actor: plan a step, sleep its scaled duration, then
// compute its tokens. Computing after the sleep means a client sees a token
// no earlier than the modelled GPU would have produced it, and a keep-mode
// pause that lands during the sleep makes the step's tokens come from the
// weights installed before resume.
func (e *Engine) loop() {
	defer close(e.done)
	for {
		e.mu.Lock()
		if e.pending == nil && e.canRunLocked() {
			p := e.core.Schedule()
			if len(p.Emits) > 0 {
				e.pending = &p
			}
		}
		if e.pending == nil || !e.canRunLocked() {
			e.mu.Unlock()
			select {
			case <-e.wake:
				continue
			case <-e.stop:
				return
			}
		}
		// The real compute of the previous step already took time the
		// modelled GPU would have spent; sleep only the remainder.
		d := time.Duration(float64(e.pending.Duration)*e.cfg.TimeScale) - e.carry
		e.mu.Unlock()
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-e.stop:
				t.Stop()
				return
			}
		} else {
			select {
			case <-e.stop:
				return
			default:
			}
		}
		e.mu.Lock()
		if e.canRunLocked() {
			start := time.Now()
			e.executeLocked(e.pending)
			e.pending = nil
			e.carry = 0
			if e.cfg.TimeScale > 0 {
				e.carry = time.Since(start)
			}
		}
		e.mu.Unlock()
	}
}

// executeLocked computes one token for each sequence in the step. Logits
// are computed in parallel across sequences (Model is safe for concurrent
// use; each sequence owns its RNG), then results are applied in plan order.
func (e *Engine) executeLocked(p *latency.Plan) {
	jobs := e.jobs[:0]
	for _, em := range p.Emits {
		s := e.seqs[em.ID]
		if s == nil {
			continue // aborted during the step
		}
		m := e.model
		if s.lora != "" {
			m = e.loras[s.lora]
			if m == nil {
				e.finishLocked(s, "abort")
				continue
			}
		}
		if em.First {
			s.cached = em.CachedTokens
			e.met.ttft.Observe(em.SinceArrival.Seconds())
		}
		jobs = append(jobs, job{s: s, m: m})
	}
	e.jobs = jobs
	e.batchJobs(jobs)
	e.runJobs(jobs, e.version)
	for _, j := range jobs {
		s := j.s
		if j.err != nil {
			e.finishLocked(s, "abort")
			continue
		}
		e.core.Append(s.id, s.out[len(s.out)-1])
		if reason := e.stopReason(s, j.m); reason != "" {
			if d, ok := e.core.SinceArrival(s.id); ok {
				e.met.e2e.Observe(d.Seconds())
			}
			e.finishLocked(s, reason)
		} else {
			notify(s.g)
		}
	}
	e.changedLocked()
}

type job struct {
	s *seqState
	m Model
	// pre holds the logits a batched Forward computed (BatchModel); err
	// is its failure (the sequence is aborted).
	pre []float32
	err error
}

// workerBuf is one decoding worker's reusable memory.
type workerBuf struct {
	logits, lsm []float32
	scratch     sampler.Scratch
}

// runJobs decodes one token per job on up to GOMAXPROCS goroutines; each
// worker touches only its own jobs' sequences and its own buffers.
func (e *Engine) runJobs(jobs []job, version int64) {
	w := min(runtime.GOMAXPROCS(0), len(jobs), maxWorkers)
	for len(e.bufs) < w {
		e.bufs = append(e.bufs, &workerBuf{})
	}
	if w <= 1 {
		for _, j := range jobs {
			if j.err == nil {
				decodeOne(j.s, j.m, e.bufs[0], version, j.pre)
			}
		}
		return
	}
	var wg sync.WaitGroup
	for k := 0; k < w; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			for i := k; i < len(jobs); i += w {
				if jobs[i].err == nil {
					decodeOne(jobs[i].s, jobs[i].m, e.bufs[k], version, jobs[i].pre)
				}
			}
		}(k)
	}
	wg.Wait()
}

const maxWorkers = 64

// decodeOne samples s's next token from pre, the logits a batched Forward
// computed, or (nil) from m.NextLogits over s's tokens.
func decodeOne(s *seqState, m Model, b *workerBuf, version int64, pre []float32) {
	v := m.VocabSize()
	if cap(b.logits) < v {
		b.logits = make([]float32, v)
		b.lsm = make([]float32, v)
	}
	logits := b.logits[:v]
	if pre != nil {
		logits = pre
	} else {
		m.NextLogits(s.all, logits)
	}
	if s.routes {
		captureRoutes(s, m)
	}
	tok, lp, sup := sampler.Sample(logits, s.params, s.rng, &b.scratch)
	if s.filtered {
		var keep []int32
		if sup == nil { // filter active but keeps the whole vocabulary
			keep = make([]int32, v)
			for i := range keep {
				keep[i] = int32(i)
			}
		} else {
			keep = append([]int32(nil), sup...)
		}
		s.support = append(s.support, keep)
		// From the same logits and support the trainer replays: the
		// support-normalised logprob a normalize_over_support trainer
		// compares its own against.
		s.slps = append(s.slps, finiteLP(sampler.SupportLogProb(logits, s.params.Temperature, keep, tok)))
	}
	if s.nTop >= 0 {
		ls := sampler.LogSoftmax(logits, s.params.Temperature, b.lsm)
		s.top = append(s.top, topK(ls, s.nTop))
	}
	s.out = append(s.out, tok)
	s.all = append(s.all, tok)
	s.lps = append(s.lps, finiteLP(lp))
	s.vers = append(s.vers, version)
	s.text = s.codec.appendText(s.text, tok)
}

// topK returns the k highest logprobs, descending, ties by lower id.
func topK(ls []float32, k int) []topEntry {
	k = min(k, len(ls))
	if k == 0 {
		return []topEntry{}
	}
	idx := make([]int32, len(ls))
	for i := range idx {
		idx[i] = int32(i)
	}
	sort.SliceStable(idx, func(a, b int) bool { return ls[idx[a]] > ls[idx[b]] })
	out := make([]topEntry, k)
	for i := range out {
		out[i] = topEntry{idx[i], finiteLP(ls[idx[i]])}
	}
	return out
}

// stopReason says whether s just finished: EOS (m's EOSIDs when it is an
// EOSModel), a stop string (removed from the text), max_tokens or the
// context limit.
func (e *Engine) stopReason(s *seqState, m Model) string {
	last := s.out[len(s.out)-1]
	if isEOS(m, last, s.codec) && !s.ignoreEOS {
		return "stop"
	}
	if i := stopIndex(s, last); i >= 0 {
		s.text = s.text[:i]
		return "stop"
	}
	if len(s.out) >= s.maxTokens {
		return "length"
	}
	return ""
}

// maxLen is the context limit for sequences served by m.
func (e *Engine) maxLen(m Model) int {
	n := e.cfg.MaxModelLen
	if m != nil && m.MaxSeqLen() > 0 && (n == 0 || m.MaxSeqLen() < n) {
		n = m.MaxSeqLen()
	}
	return n
}

func notify(g *group) {
	select {
	case g.notify <- struct{}{}:
	default:
	}
}

// finishLocked ends s with reason and removes it from the core.
func (e *Engine) finishLocked(s *seqState, reason string) {
	if s.finish != "" {
		return
	}
	s.finish = reason
	e.core.Finish(s.id)
	delete(e.seqs, s.id)
	for i, h := range e.held {
		if h == s {
			e.held = append(e.held[:i], e.held[i+1:]...)
			break
		}
	}
	done := true
	for _, x := range s.g.seqs {
		if x.finish == "" {
			done = false
		}
	}
	if done {
		delete(e.groups, s.g.id)
	}
	notify(s.g)
}
