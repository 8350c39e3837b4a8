package staleness

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// model is the naive reference: explicit sets instead of counters.
type model struct {
	s, w, b      int64
	step         int64
	running      []string
	accepted     []string // finished, not yet checked
	trained      int64
	fate         map[string]string // group id → trained|filtered|requeued
	requeuedFrom map[string]bool
}

func (m *model) capacity() int64 {
	run := int64(len(m.running))
	acc := int64(len(m.accepted)) + m.trained
	return min(m.w-run, (m.s+m.step)*m.b-(acc+run))
}

func remove(xs []string, x string) []string {
	i := slices.Index(xs, x)
	return slices.Delete(xs, i, i+1)
}

func genConfig(t *rapid.T) Config {
	s := rapid.Int64Range(0, 4).Draw(t, "S")
	b := rapid.Int64Range(1, 4).Draw(t, "B")
	w := rapid.Int64Range(b, b*(s+1)).Draw(t, "W")
	p := rapid.SampledFrom([]StalePolicy{PolicyRequeue, PolicyAccept}).Draw(t, "policy")
	return Config{MaxStalenessSteps: s, NumParallelGenerationWorkers: w, MiniBatchSize: b, StalePolicy: p}
}

func TestPropertyAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := &model{s: cfg.MaxStalenessSteps, w: cfg.NumParallelGenerationWorkers, b: cfg.MiniBatchSize,
			step: 1, fate: map[string]string{}, requeuedFrom: map[string]bool{}}
		now := t0
		nPrompts := 0
		setFate := func(id, f string) {
			if old, ok := m.fate[id]; ok {
				t.Fatalf("group %s settled twice: %s then %s", id, old, f)
			}
			m.fate[id] = f
		}
		checkOne := func(id string) {
			d, err := c.CheckForTraining(id, now)
			if err != nil {
				t.Fatal(err)
			}
			m.accepted = remove(m.accepted, id)
			if d.Verdict == Train {
				if cfg.StalePolicy == PolicyRequeue && d.Staleness > cfg.MaxStalenessSteps {
					t.Fatalf("trained group %s with staleness %d > S=%d", id, d.Staleness, cfg.MaxStalenessSteps)
				}
				m.trained++
				setFate(id, "trained")
			} else {
				setFate(id, "requeued")
			}
		}
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for range steps {
			now = now.Add(time.Duration(rapid.IntRange(0, 5).Draw(t, "dt")) * time.Second)
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0: // acquire
				nPrompts++
				want := m.capacity() > 0
				a, ok := c.TryAcquire(fmt.Sprintf("p%d", nPrompts), now)
				if ok != want {
					t.Fatalf("TryAcquire ok=%t, model capacity %d", ok, m.capacity())
				}
				if ok {
					m.running = append(m.running, a.GroupID)
				}
			case 1: // accept
				if len(m.running) == 0 {
					continue
				}
				id := rapid.SampledFrom(m.running).Draw(t, "accept")
				v := rapid.Int64Range(-1, c.Version()).Draw(t, "oldest")
				if err := c.Accept(id, v, now); err != nil {
					t.Fatal(err)
				}
				m.running = remove(m.running, id)
				m.accepted = append(m.accepted, id)
			case 2: // filter
				if len(m.accepted) == 0 {
					continue
				}
				id := rapid.SampledFrom(m.accepted).Draw(t, "filter")
				if err := c.Filter(id, now); err != nil {
					t.Fatal(err)
				}
				m.accepted = remove(m.accepted, id)
				setFate(id, "filtered")
			case 3: // abort
				if len(m.running) == 0 {
					continue
				}
				id := rapid.SampledFrom(m.running).Draw(t, "abort")
				if err := c.Abort(id, now); err != nil {
					t.Fatal(err)
				}
				m.running = remove(m.running, id)
				setFate(id, "requeued")
			case 4: // check for training
				if len(m.accepted) == 0 {
					continue
				}
				checkOne(rapid.SampledFrom(m.accepted).Draw(t, "check"))
			case 5:
				if _, err := c.StepDone(c.Step(), now); err != nil {
					t.Fatal(err)
				}
				m.step++
			}
			got := c.Metrics()
			if got.Capacity != m.capacity() || got.Capacity < 0 {
				t.Fatalf("capacity %d, model %d", got.Capacity, m.capacity())
			}
			if got.Running != int64(len(m.running)) || got.Accepted != int64(len(m.accepted))+m.trained {
				t.Fatalf("counters %+v vs model running %d accepted %d trained %d", got, len(m.running), len(m.accepted), m.trained)
			}
			if got.Submitted != got.Running+got.Accepted+got.Filtered+got.Aborted+got.StaleDropped {
				t.Fatalf("counters inconsistent: %+v", got)
			}
			for _, rq := range c.Drain() {
				if m.requeuedFrom[rq.GroupID] {
					t.Fatalf("group %s requeued twice", rq.GroupID)
				}
				m.requeuedFrom[rq.GroupID] = true
			}
		}
		// Settle everything still in flight.
		for _, id := range slices.Clone(m.running) {
			if err := c.Accept(id, UnknownVersion, now); err != nil {
				t.Fatal(err)
			}
			m.running = remove(m.running, id)
			m.accepted = append(m.accepted, id)
		}
		for _, id := range slices.Clone(m.accepted) {
			checkOne(id)
		}
		for _, rq := range c.Drain() {
			m.requeuedFrom[rq.GroupID] = true
		}
		got := c.Metrics()
		if int(got.Submitted) != len(m.fate) || c.Groups() != 0 {
			t.Fatalf("submitted %d, settled %d, held %d", got.Submitted, len(m.fate), c.Groups())
		}
		for id, f := range m.fate {
			if (f == "requeued") != m.requeuedFrom[id] {
				t.Fatalf("group %s fate %s, requeue emitted %t", id, f, m.requeuedFrom[id])
			}
		}
	})
}

// If the filter drops every group, the trainer never steps; the loop must
// still always be able to admit new work.
func TestPropertyAllFilteredNeverDeadlocks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		c, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rounds := rapid.IntRange(1, 30).Draw(t, "rounds")
		for r := range rounds {
			var ids []string
			for {
				a, ok := c.TryAcquire("p", t0)
				if !ok {
					break
				}
				ids = append(ids, a.GroupID)
			}
			if len(ids) == 0 {
				t.Fatalf("round %d: deadlock, nothing admitted: %+v", r, c.Metrics())
			}
			// Finish a random subset, filter what finished.
			k := rapid.IntRange(1, len(ids)).Draw(t, "finish")
			for _, id := range ids[:k] {
				if err := c.Accept(id, UnknownVersion, t0); err != nil {
					t.Fatal(err)
				}
				if err := c.Filter(id, t0); err != nil {
					t.Fatal(err)
				}
			}
			if c.Capacity() <= 0 {
				t.Fatalf("round %d: capacity %d after filtering %d groups", r, c.Capacity(), k)
			}
			for _, id := range ids[k:] {
				if err := c.Accept(id, UnknownVersion, t0); err != nil {
					t.Fatal(err)
				}
				if err := c.Filter(id, t0); err != nil {
					t.Fatal(err)
				}
			}
		}
		if c.Step() != 1 || c.Metrics().Accepted != 0 {
			t.Fatalf("%+v", c.Metrics())
		}
	})
}
