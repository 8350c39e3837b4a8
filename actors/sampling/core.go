package sampling

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/asyncrl/asyncrl/actors/effect"
	"github.com/asyncrl/asyncrl/actors/filter"
	"github.com/asyncrl/asyncrl/messages"
)

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("sampling: invalid config")

// Config configures the sampling core.
type Config struct {
	// Filter is the dynamic-sampling configuration (mode, n, tolerance).
	Filter filter.Config
	// RunID and Sender fill the headers of outgoing messages.
	RunID, Sender string
	// Kept receives groups that carry a learning signal (GroupReady,
	// forwarded unchanged); Filtered receives GroupFiltered.
	Kept, Filtered string
}

// Validate names the first invalid field.
func (c Config) Validate() error {
	if err := c.Filter.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.Kept == "" || c.Filtered == "" {
		return fmt.Errorf("%w: Kept and Filtered subjects must be set", ErrInvalidConfig)
	}
	return nil
}

// Stats counts the core's decisions.
type Stats struct {
	Kept, Dropped, Invalid int64
	// ByReason counts decisions per filter.Reason.
	ByReason map[filter.Reason]int64
	// Rewards tallies the rewards of every group judged, kept or dropped,
	// by the policy version that generated it (the group's oldest token
	// version). The trained mini-batches' mean reward cannot show a
	// policy getting better under dynamic sampling: the groups it gets
	// right every time are the ones dropped (SkyRL's fully async trainer
	// logs them apart for that reason, reward_dropped/avg_raw_reward in
	// skyrl/train/fully_async_trainer.py at a9564572). This is the mean
	// over everything the policy generated.
	Rewards map[int64]RewardTally
}

// RewardTally is the rewards of the groups one policy version generated:
// how many groups, how many finite rewards, and their sum (a NaN reward
// is counted in NaN, not summed).
type RewardTally struct {
	Groups, Trajectories, NaN int64
	Sum                       float64
}

// Mean is Sum / Trajectories (0 for none).
func (t RewardTally) Mean() float64 {
	if t.Trajectories == 0 {
		return 0
	}
	return t.Sum / float64(t.Trajectories)
}

// Core is the sampling actor's core: for every finished group it asks the
// dynamic-sampling filter (package filter) whether the group carries a
// learning signal, and forwards it (kept) or announces a GroupFiltered so
// the controller releases the group's capacity. It decides on the rewards
// GroupReady carries; the token batch passes through untouched. Pure (see
// package actors).
type Core struct {
	effect.Effects[messages.Message]
	cfg   Config
	stats Stats
}

var _ effect.Core[messages.Message, messages.Message] = (*Core)(nil)

// New builds a core.
func New(cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Core{cfg: cfg, stats: Stats{ByReason: map[filter.Reason]int64{}, Rewards: map[int64]RewardTally{}}}, nil
}

// Tick is unused: the core arms no timers.
func (c *Core) Tick(time.Time, string) {}

// Stats returns a copy of the counters.
func (c *Core) Stats() Stats {
	s := c.stats
	s.ByReason = make(map[filter.Reason]int64, len(c.stats.ByReason))
	for k, v := range c.stats.ByReason {
		s.ByReason[k] = v
	}
	s.Rewards = maps.Clone(c.stats.Rewards)
	return s
}

// tally adds g's rewards to its version's RewardTally.
func (c *Core) tally(g messages.GroupReady) {
	if len(g.Rewards) == 0 {
		return
	}
	t := c.stats.Rewards[g.OldestVersion]
	t.Groups++
	for _, r := range g.Rewards {
		if math.IsNaN(r) {
			t.NaN++
			continue
		}
		t.Trajectories++
		t.Sum += r
	}
	c.stats.Rewards[g.OldestVersion] = t
}

// Step judges one GroupReady; other messages are ignored.
func (c *Core) Step(_ time.Time, in messages.Message) {
	g, ok := in.(messages.GroupReady)
	if !ok {
		return
	}
	c.tally(g)
	samples := make([]filter.Sample, len(g.Rewards))
	for i, r := range g.Rewards {
		samples[i] = filter.Scalar(g.GroupID, r)
	}
	d, err := c.cfg.Filter.Decide(samples)
	if err != nil {
		// An empty group cannot be trained; dropping it releases its
		// capacity instead of leaking it.
		c.stats.Invalid++
		c.Log(effect.LevelWarn, "invalid", "group cannot be judged; dropped",
			effect.Field{Key: "group", Value: g.GroupID}, effect.Field{Key: "err", Value: err.Error()})
		c.drop(g, messages.FilterEmpty)
		return
	}
	c.stats.ByReason[d.Reason]++
	if d.Keep {
		// zero_variance_mask keeps every group: the controller zeroes the
		// loss masks when it assembles the mini-batch, judging the group on
		// the real per-token loss masks in its token batch.
		c.stats.Kept++
		c.Send(c.cfg.Kept, g)
		return
	}
	c.drop(g, dropReason(d.Reason))
}

// dropReason maps the filter's verdict to the wire's FilterReason.
func dropReason(r filter.Reason) messages.FilterReason {
	switch r {
	case filter.ReasonSingleTrajectory:
		return messages.FilterSingleTrajectory
	case filter.ReasonNaN:
		return messages.FilterNaN
	}
	return messages.FilterZeroVariance
}

func (c *Core) drop(g messages.GroupReady, reason messages.FilterReason) {
	c.stats.Dropped++
	c.Send(c.cfg.Filtered, messages.GroupFiltered{
		Header:  messages.Header{RunID: c.cfg.RunID, Sender: c.cfg.Sender, Version: g.OldestVersion},
		GroupID: g.GroupID, PromptID: g.PromptID, Reason: reason,
	})
}
