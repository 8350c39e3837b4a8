package policy

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// AddReplica adds a healthy, active replica serving version 0. With a
// minimum version above 0 it takes no sessions until SetVersion says it
// caught up.
func (c *Core) AddReplica(url string) error {
	if url == "" {
		return fmt.Errorf("%w: empty URL", ErrUnknownReplica)
	}
	if _, ok := c.replicas[url]; ok {
		return fmt.Errorf("%w: %s", ErrDuplicateReplica, url)
	}
	r := &replica{url: url, healthy: true, prefixes: newPrefixLRU(c.cfg.PrefixCacheEntries)}
	c.replicas[url] = r
	i := sort.Search(len(c.order), func(i int) bool { return c.order[i].url >= url })
	c.order = append(c.order, nil)
	copy(c.order[i+1:], c.order[i:])
	c.order[i] = r
	c.rebuildRing()
	return nil
}

// RemoveReplica removes a replica and forgets the sessions mapped to it
// (they are placed afresh on their next request).
func (c *Core) RemoveReplica(url string) error {
	r, ok := c.replicas[url]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownReplica, url)
	}
	for k, s := range c.sessions {
		if s.replica == r {
			delete(c.sessions, k)
		}
	}
	delete(c.replicas, url)
	for i, o := range c.order {
		if o == r {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
	c.rebuildRing()
	return nil
}

// SetReplicas makes the replica set exactly urls: missing ones are added
// (healthy, active, version 0), absent ones removed, the rest kept as is.
func (c *Core) SetReplicas(urls []string) error {
	want := make(map[string]bool, len(urls))
	for _, u := range urls {
		want[u] = true
	}
	for _, r := range append([]*replica(nil), c.order...) {
		if !want[r.url] {
			if err := c.RemoveReplica(r.url); err != nil {
				return err
			}
		}
	}
	for _, u := range urls {
		if _, ok := c.replicas[u]; !ok {
			if err := c.AddReplica(u); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Core) rebuildRing() {
	if c.cfg.Policy != ConsistentHash {
		return
	}
	urls := make([]string, len(c.order))
	for i, r := range c.order {
		urls[i] = r.url
	}
	c.ring = buildRing(urls, c.cfg.VirtualNodes)
}

func (c *Core) get(url string) (*replica, error) {
	r, ok := c.replicas[url]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownReplica, url)
	}
	return r, nil
}

// SetHealth marks a replica healthy or not. Sessions on an unhealthy
// replica are moved on their next request (SkyRL: stickiness breaks only
// then).
func (c *Core) SetHealth(url string, healthy bool) error {
	r, err := c.get(url)
	if err != nil {
		return err
	}
	r.healthy = healthy
	r.fails, r.oks = 0, 0
	return nil
}

// ObserveHealth applies one health signal and reports whether the
// replica's health changed. A failure — probe or proxied connection
// failure — counts toward FailThreshold consecutive failures; a success
// resets the failure streak, and only a successful probe (probe = true)
// counts toward RecoverThreshold: a replica is brought back by the
// checker, not by the odd request that happened to get through.
func (c *Core) ObserveHealth(url string, ok, probe bool) (changed bool, err error) {
	r, err := c.get(url)
	if err != nil {
		return false, err
	}
	if !ok {
		r.oks = 0
		r.fails++
		if r.healthy && r.fails >= c.cfg.FailThreshold {
			r.healthy = false
			return true, nil
		}
		return false, nil
	}
	r.fails = 0
	if !probe {
		return false, nil
	}
	r.oks++
	if !r.healthy && r.oks >= c.cfg.RecoverThreshold {
		r.healthy = true
		return true, nil
	}
	return false, nil
}

// SetState sets a replica's serving state (active, paused, updating,
// draining).
func (c *Core) SetState(url string, s State) error {
	r, err := c.get(url)
	if err != nil {
		return err
	}
	if s > Draining {
		return fmt.Errorf("policy: invalid state %d", s)
	}
	r.state = s
	return nil
}

// SetVersion records the weight version a replica serves (acknowledged).
func (c *Core) SetVersion(url string, v int64) error {
	r, err := c.get(url)
	if err != nil {
		return err
	}
	r.version = v
	return nil
}

// Version returns the weight version a replica serves, as last recorded
// by SetVersion (0 for a replica never told), and whether the replica is
// known. The proxy reads it to stamp responses with the versions a
// replica served while a request was on it.
func (c *Core) Version(url string) (int64, bool) {
	r, ok := c.replicas[url]
	if !ok {
		return 0, false
	}
	return r.version, true
}

// SetMinVersion sets the minimum version a replica must serve to take
// traffic.
func (c *Core) SetMinVersion(v int64) { c.minVersion = v }

// MinVersion returns the minimum version.
func (c *Core) MinVersion() int64 { return c.minVersion }

// ObserveMetrics records an engine's own queue length and KV usage (0–1)
// as scraped at now. bounded_sticky uses them while ≤ MetricsMaxAge old.
func (c *Core) ObserveMetrics(now time.Time, url string, queueLen int, kvUsage float64) error {
	r, err := c.get(url)
	if err != nil {
		return err
	}
	if queueLen < 0 {
		queueLen = 0
	}
	if !(kvUsage >= 0) { // also NaN
		kvUsage = 0
	}
	r.queueLen, r.kvUsage, r.metricsAt = queueLen, math.Min(kvUsage, 1), now
	return nil
}
