package controller

import (
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/actors/effect"
	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/actors/staleness"
	"github.com/asyncrl/asyncrl/messages"
)

// Dynamic sampling at mini-batch assembly, SkyRL's semantics
// (skyrl-train/skyrl_train/utils/trainer_utils.py handle_dynamic_sampling,
// handle_filter_sampling, handle_replace_sampling, zero_variance_filter)
// carried over to the asynchronous loop: a generation batch is B
// consecutive finished groups (kept or filtered) in arrival order, B =
// mini_batch_size = SkyRL's train_batch_size.

// arrival is one finished group in arrival order: good (a GroupReady held
// in c.batch) or bad (a GroupFiltered, already released).
type arrival struct {
	id   string
	good bool
}

func (c *Core) b() int { return int(c.cfg.Staleness.MiniBatchSize) }

// consume removes the arrivals up to and including lastID (the last group
// of a dispatched mini-batch) and returns how many generation batches
// (ceil(arrivals/B)) it took to fill it.
func (c *Core) consume(lastID string) int {
	n := len(c.arrivals)
	for i, a := range c.arrivals {
		if a.id == lastID {
			n = i + 1
			break
		}
	}
	c.arrivals = append([]arrival(nil), c.arrivals[n:]...)
	return max(1, (n+c.b()-1)/c.b())
}

// forget removes a group requeued for staleness from the arrivals: it
// will be generated again, so it counts in no generation batch.
func (c *Core) forget(id string) {
	for i, a := range c.arrivals {
		if a.id == id {
			c.arrivals = append(c.arrivals[:i], c.arrivals[i+1:]...)
			return
		}
	}
}

// checkExhausted is filter mode's max_sample_batches: once that many
// generation batches arrived for the step and it still could not be
// filled, sampling is exhausted (SkyRL raises).
func (c *Core) checkExhausted(now time.Time, step int64) {
	m := c.cfg.Sampling.MaxSampleBatches
	mode := c.cfg.Sampling.Mode
	if (mode != filter.ModeFilter && mode != filter.ModeZeroVarianceMask) || m <= 0 || len(c.arrivals) < m*c.b() {
		return
	}
	c.exhaust(now, step, int64(len(c.arrivals)/c.b()), int64(len(c.batch)))
}

// exhaust hands every held, unchecked group back untrained (requeued with
// reason max_sample_batches, so its prompt is generated again: nothing is
// lost), starts the step's sampling over and announces SamplingExhausted;
// the run stops on it as SkyRL does.
func (c *Core) exhaust(now time.Time, step, batches, good int64) {
	c.stats.SamplingExhausted++
	held := c.batch[c.checked:]
	for _, g := range held {
		if err := c.ctl.Release(g.GroupID, now); err != nil {
			panic(fmt.Sprintf("controller: release of held group %s: %v", g.GroupID, err)) // broken invariant
		}
	}
	c.batch = c.batch[:c.checked]
	for _, g := range c.bad { // replace mode: judged bad, so filtered, not requeued
		c.settleFiltered(now, g.GroupID, g.PromptID, true)
	}
	c.bad = nil
	c.arrivals = c.arrivals[:0]
	for _, g := range c.batch {
		c.arrivals = append(c.arrivals, arrival{id: g.GroupID, good: true})
	}
	c.sampled = 0
	c.requeues(fmt.Sprintf("max_sample_batches %d reached for step %d", c.cfg.Sampling.MaxSampleBatches, step))
	c.Log(effect.LevelError, "exhausted", "dynamic sampling reached max_sample_batches without a full mini-batch; held groups requeued",
		effect.Field{Key: "mode", Value: string(c.cfg.Sampling.Mode)}, effect.Field{Key: "step", Value: fmt.Sprint(step)},
		effect.Field{Key: "batches", Value: fmt.Sprint(batches)}, effect.Field{Key: "good", Value: fmt.Sprint(good)})
	if c.cfg.Subjects.Settled != "" {
		c.Send(c.cfg.Subjects.Settled, messages.SamplingExhausted{Header: c.header(), Mode: string(c.cfg.Sampling.Mode),
			Step: step, SampleBatches: batches, MiniBatch: int64(c.b()), Good: good, Requeued: int64(len(held))})
	}
}

// dispatchReplace is POLARIS replacement: each generation batch of B
// arrivals is judged as a whole (groups already too stale are requeued
// first and take no slot). If good groups > B × min_replace_ratio, the
// good ones are checked for staleness and every other slot (a bad group,
// or a good one found stale) takes a copy of a fresh good group
// (filter.ReplaceSlots, donors drawn from Config.Rand), so the mini-batch
// keeps B slots; otherwise the batch is discarded — its good groups are
// filtered (reason resampled) — and the next one is sampled, up to
// max_sample_batches.
func (c *Core) dispatchReplace(now time.Time, step int64) {
	b := c.b()
	for c.dispatched < step {
		c.requeueStale(now)
		if len(c.arrivals) < b {
			return
		}
		gen := c.arrivals[:b]
		k := 0
		for _, a := range gen {
			if a.good {
				if c.batch[k].GroupID != a.id {
					panic(fmt.Sprintf("controller: arrival %s is not the held group %s", a.id, c.batch[k].GroupID)) // broken invariant
				}
				k++
			}
		}
		goods := append([]messages.GroupReady(nil), c.batch[:k]...)
		c.batch = append([]messages.GroupReady(nil), c.batch[k:]...)
		bads := append([]messages.GroupFiltered(nil), c.bad[:b-k]...)
		c.bad = append([]messages.GroupFiltered(nil), c.bad[b-k:]...)
		c.sampled++
		if !filter.EnoughGood(k, b, c.cfg.Sampling.MinReplaceRatio) {
			// Discard and sample again: every group of the batch releases
			// its slot (the good ones as resampled, the bad as filtered).
			c.stats.Resampled++
			for _, g := range goods {
				c.settleFiltered(now, g.GroupID, g.PromptID, true)
			}
			for _, g := range bads {
				c.settleFiltered(now, g.GroupID, g.PromptID, true)
			}
			c.arrivals = append([]arrival(nil), c.arrivals[b:]...)
			if m := c.cfg.Sampling.MaxSampleBatches; m > 0 && c.sampled >= m {
				c.exhaust(now, step, int64(c.sampled), int64(k))
			}
			continue
		}
		fresh := make([]bool, b)
		pos := make([]int, b) // slot → index in chosen
		var chosen []messages.GroupReady
		gi := 0
		for i, a := range gen {
			if !a.good {
				continue
			}
			g := goods[gi]
			gi++
			d, err := c.ctl.CheckForTraining(g.GroupID, now)
			if err != nil {
				panic(fmt.Sprintf("controller: check of accepted group %s: %v", g.GroupID, err))
			}
			if d.Verdict == staleness.Drop {
				c.requeues("")
				continue
			}
			c.Send(c.cfg.Subjects.Settled, messages.GroupAccepted{Header: c.header(), GroupID: g.GroupID,
				PromptID: g.PromptID, Step: step, Staleness: d.Staleness})
			fresh[i], pos[i] = true, len(chosen)
			chosen = append(chosen, g)
		}
		c.arrivals = append([]arrival(nil), c.arrivals[b:]...)
		if len(chosen) == 0 {
			continue // every good group was stale (requeued): sample on
		}
		_, donor := filter.ReplaceSlots(fresh, 0, c.cfg.Rand) // ≥ 1 fresh: always ok
		slots := make([]slot, b)
		for i := range slots {
			slots[i] = slot{group: pos[donor[i]], copy: donor[i] != i}
		}
		c.stats.Replaced += int64(b - len(chosen))
		for _, g := range bads {
			c.settleFiltered(now, g.GroupID, g.PromptID, false) // its slot holds a copy
		}
		batches := c.sampled
		c.sampled = 0
		c.send(now, step, chosen, slots, batches)
	}
}

// slot is one place of a mini-batch: the index of the group that fills
// it, and whether that is a copy (replace) rather than the group's own.
type slot struct {
	group int
	copy  bool
}

// settleFiltered settles a bad (or discarded) group of replace mode as
// filtered: release gives its slot back (staleness Filter: the batch was
// discarded), otherwise the step consumed it (Consume: a copy fills it).
func (c *Core) settleFiltered(now time.Time, id, prompt string, release bool) {
	op, err := c.ctl.Consume, error(nil)
	if release {
		op = c.ctl.Filter
	}
	if err = op(id, now); err != nil {
		panic(fmt.Sprintf("controller: settle of held group %s: %v", id, err)) // broken invariant
	}
	a := c.groups[id]
	delete(c.groups, id)
	c.stats.Filtered++
	c.ledger(prompt, id, messages.LedgerFiltered, a.attempt)
}

// discardMasked is zero_variance_mask's guard: while the next B waiting
// groups would have no trained token left once masked (every group flat,
// or no live trajectory), they are filtered — their slots released — and
// the step waits for the next B. It reports whether B groups with
// something to train wait. SkyRL would run that step on a zero loss; the
// built-in trainer refuses a mini-batch without a trained token, and such
// a step changes nothing. The discarded groups count as generation
// batches, so max_sample_batches bounds this as it bounds filter mode.
func (c *Core) discardMasked(now time.Time) bool {
	b := c.b()
	for len(c.batch) >= b {
		if c.trainable(c.batch[:b]) {
			return true
		}
		c.stats.Resampled++
		for _, g := range c.batch[:b] {
			c.settleFiltered(now, g.GroupID, g.PromptID, true)
		}
		c.batch = append([]messages.GroupReady(nil), c.batch[b:]...)
	}
	return false
}

// trainable reports whether any trajectory of gs keeps a trained token
// after zero-variance masking. A batch that cannot be decoded counts as
// trainable: merge reports it.
func (c *Core) trainable(gs []messages.GroupReady) bool {
	for _, g := range gs {
		tb, err := messages.DecodeTokenBatch(g.Batch.Inline)
		if err != nil {
			return true
		}
		ts := make([]messages.Trajectory, 0, tb.Len())
		for i := range tb.Len() {
			t, err := tb.Trajectory(i)
			if err != nil {
				return true
			}
			ts = append(ts, t)
		}
		maskZeroVariance(ts, c.cfg.Sampling.ZeroVarianceTol)
		for _, t := range ts {
			for _, m := range t.LossMask {
				if m != 0 {
					return true
				}
			}
		}
	}
	return false
}

// requeueStale requeues every waiting group that is already too stale to
// train (staleness.Controller.WouldDrop), so it takes no slot in a
// generation batch: replace mode judges a batch whole and must not copy
// good groups over slots that staleness, not the reward, emptied.
func (c *Core) requeueStale(now time.Time) {
	for i := 0; i < len(c.batch); {
		g := c.batch[i]
		drop, err := c.ctl.WouldDrop(g.GroupID)
		if err != nil {
			panic(fmt.Sprintf("controller: peek of accepted group %s: %v", g.GroupID, err)) // broken invariant
		}
		if !drop {
			i++
			continue
		}
		if _, err := c.ctl.CheckForTraining(g.GroupID, now); err != nil {
			panic(fmt.Sprintf("controller: check of accepted group %s: %v", g.GroupID, err))
		}
		c.batch = append(c.batch[:i], c.batch[i+1:]...)
		c.forget(g.GroupID)
		c.requeues("")
	}
}

// merge concatenates the groups' token batches into one Arrow batch for
// the trainer: slots[i] fills slot i (slots nil: each group once, in
// order). A group copied into a further slot keeps its group id — GRPO
// advantages see the donor group twice, as SkyRL's replaced uids do — and
// its trajectory ids get "~copy<slot>". Under zero_variance_mask the loss
// mask of a zero-variance group's live trajectories is zeroed here, judged
// on the real per-token loss masks (filter.ZeroVarianceMask).
func (c *Core) merge(gs []messages.GroupReady, slots []slot) (merged, error) {
	trajs := make([][]messages.Trajectory, len(gs))
	var out *messages.TokenBatch
	for gi, g := range gs {
		tb, err := messages.DecodeTokenBatch(g.Batch.Inline)
		if err != nil {
			return merged{}, fmt.Errorf("group %s: %w", g.GroupID, err)
		}
		if out == nil {
			if out, err = messages.NewTokenBatch(tb.Spec()); err != nil {
				return merged{}, err
			}
		}
		for i := range tb.Len() {
			t, err := tb.Trajectory(i)
			if err != nil {
				return merged{}, fmt.Errorf("group %s: %w", g.GroupID, err)
			}
			trajs[gi] = append(trajs[gi], t)
		}
		if c.cfg.Sampling.Mode == filter.ModeZeroVarianceMask {
			c.stats.Masked += int64(maskZeroVariance(trajs[gi], c.cfg.Sampling.ZeroVarianceTol))
		}
	}
	if out == nil {
		return merged{}, fmt.Errorf("controller: no groups to merge")
	}
	if slots == nil {
		slots = make([]slot, len(gs))
		for i := range slots {
			slots[i] = slot{group: i}
		}
	}
	for i, sl := range slots {
		for _, t := range trajs[sl.group] {
			if sl.copy {
				t.ID = fmt.Sprintf("%s~copy%d", t.ID, i)
			}
			if err := out.Append(t); err != nil {
				return merged{}, fmt.Errorf("group %s: %w", gs[sl.group].GroupID, err)
			}
		}
	}
	data, err := messages.EncodeTokenBatch(out)
	if err != nil {
		return merged{}, err
	}
	return merged{data: data, tokens: int64(out.NumTokens()), trajs: int32(out.Len())}, nil
}

// maskZeroVariance zeroes the loss mask of the live trajectories of one
// group that filter.ZeroVarianceMask masks and returns how many it zeroed.
// The score is the sum of the token rewards when the batch has them, else
// the trajectory's reward.
func maskZeroVariance(ts []messages.Trajectory, tol float64) int {
	samples := make([]filter.Sample, len(ts))
	for i, t := range ts {
		s := filter.Sample{UID: t.GroupID, TokenRewards: []float64{float64(t.Reward)}, LossMask: make([]float64, len(t.LossMask))}
		if t.TokenRewards != nil {
			s.TokenRewards = make([]float64, len(t.TokenRewards))
			for j, r := range t.TokenRewards {
				s.TokenRewards[j] = float64(r)
			}
		}
		for j, m := range t.LossMask {
			s.LossMask[j] = float64(m)
		}
		samples[i] = s
	}
	n := 0
	for _, i := range filter.ZeroVarianceMask(samples, tol) {
		if samples[i].Live() {
			ts[i].LossMask = make([]uint8, len(ts[i].LossMask))
			n++
		}
	}
	return n
}
