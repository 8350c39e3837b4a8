package policy

import "sort"

func (c *Core) view(r *replica) ReplicaView {
	return ReplicaView{
		URL: r.url, Healthy: r.healthy, State: r.state, Version: r.version, Lag: c.newest - r.version,
		Sessions: r.sessions, InflightRequests: r.inflightReqs, InflightTokens: r.inflightTokens,
		QueueLen: r.queueLen, KVUsage: r.kvUsage, MetricsAt: r.metricsAt, Eligible: c.takesNew(r),
	}
}

// Replicas returns a snapshot of every replica, in URL order.
func (c *Core) Replicas() []ReplicaView {
	c.refresh()
	out := make([]ReplicaView, len(c.order))
	for i, r := range c.order {
		out[i] = c.view(r)
	}
	return out
}

// Replica returns a snapshot of one replica.
func (c *Core) Replica(url string) (ReplicaView, bool) {
	r, ok := c.replicas[url]
	if !ok {
		return ReplicaView{}, false
	}
	c.refresh()
	return c.view(r), true
}

// Lookup returns a snapshot of one session.
func (c *Core) Lookup(key string) (SessionView, bool) {
	s, ok := c.sessions[key]
	if !ok {
		return SessionView{}, false
	}
	return SessionView{Key: key, Replica: s.replica.url, LastAccess: s.lastAccess, PrefixHash: s.prefix}, true
}

// SessionCount returns the number of tracked sessions.
func (c *Core) SessionCount() int { return len(c.sessions) }

// Sessions returns every tracked session, sorted by key (for tests and
// debugging; O(n log n)).
func (c *Core) Sessions() []SessionView {
	out := make([]SessionView, 0, len(c.sessions))
	for k := range c.sessions {
		v, _ := c.Lookup(k)
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
