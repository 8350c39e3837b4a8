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
// after zero-variance masking: a group not masked with a live trajectory.
func (c *Core) trainable(gs []messages.GroupReady) bool {
	for _, g := range gs {
		if live(g) > 0 && !zeroVariance(g, c.cfg.Sampling.ZeroVarianceTol) {
			return true
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

// refs builds the TrainBatch's group references for gs: slots[i] fills
// slot i (slots nil: each group once, in order). A group copied into a
// further slot keeps its group id — GRPO advantages see the donor group
// twice, as SkyRL's replaced uids do — and the trainer renames its
// trajectories "~copy<slot>" (package actors/trainer/assemble). Under
// zero_variance_mask a zero-variance group is flagged ZeroMask, judged on
// its rewards and which trajectories train a token (GroupReady's
// TrainedTokens: filter.ZeroVarianceMask's rule without the token
// batch); the trainer zeroes its loss masks. Tokens and Trajectories
// count every slot.
func (c *Core) refs(gs []messages.GroupReady, slots []slot) (messages.TrainBatch, error) {
	var tb messages.TrainBatch
	if len(gs) == 0 {
		return tb, fmt.Errorf("controller: no groups to train")
	}
	tb.Groups = make([]messages.GroupRef, len(gs))
	for i, g := range gs {
		tb.Groups[i] = messages.GroupRef{GroupID: g.GroupID, Batch: g.Batch}
		if c.cfg.Sampling.Mode == filter.ModeZeroVarianceMask && zeroVariance(g, c.cfg.Sampling.ZeroVarianceTol) {
			tb.Groups[i].ZeroMask = true
			c.stats.Masked += int64(live(g))
		}
	}
	if slots == nil {
		slots = make([]slot, len(gs))
		for i := range slots {
			slots[i] = slot{group: i}
		}
	} else {
		tb.Slots = make([]messages.Slot, len(slots))
		for i, sl := range slots {
			tb.Slots[i] = messages.Slot{Group: int32(sl.group), Copy: sl.copy}
		}
	}
	for _, sl := range slots {
		tb.Tokens += gs[sl.group].Tokens
		tb.Trajectories += int32(len(gs[sl.group].TrajectoryIDs))
	}
	return tb, nil
}

// samples is g's trajectories as the filter sees them: the reward as the
// score, and a one-element loss mask of its trained-token count (so
// Sample.Live is "trains some token"); without TrainedTokens every
// trajectory is live.
func samples(g messages.GroupReady) []filter.Sample {
	out := make([]filter.Sample, len(g.Rewards))
	for i, r := range g.Rewards {
		out[i] = filter.Scalar(g.GroupID, r)
		if i < len(g.TrainedTokens) {
			out[i].LossMask = []float64{float64(g.TrainedTokens[i])}
		}
	}
	return out
}

// zeroVariance reports whether zero_variance_mask masks group g
// (filter.ZeroVarianceMask: its live trajectories' scores within tol, or
// a NaN among them).
func zeroVariance(g messages.GroupReady, tol float64) bool {
	return len(filter.ZeroVarianceMask(samples(g), tol)) > 0
}

// live counts g's trajectories that train some token.
func live(g messages.GroupReady) int {
	n := 0
	for _, s := range samples(g) {
		if s.Live() {
			n++
		}
	}
	return n
}
