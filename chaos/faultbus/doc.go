// Package faultbus is a transport.Bus decorator that drops, delays and
// duplicates publishes by subject, for chaos tests over the real NATS bus
// (the in-memory hub has its own fault hooks, used by the simulator).
//
// # Contract
//
// Wrap(inner, seed) returns a Bus that forwards everything to inner.
// SetRules installs rules; a Publish on a subject matching a rule's NATS
// pattern (first matching rule wins) is, in this order: dropped with
// probability Drop (Publish still returns nil — the sender cannot tell, as
// with a message lost on the wire), delayed by Delay (published on inner
// later, from a timer; Publish returns at once), and duplicated with
// probability Duplicate (published twice). Subscriptions, requests,
// replies and streams pass through unchanged: a stream's durability is
// what is being tested, not faulted.
//
// Random choices come from one PCG seeded by seed, under a mutex, so the
// same sequence of publishes from one goroutine gets the same faults.
// Stats counts what was done. Close cancels delayed publishes not yet sent,
// waits for their timers and closes inner.
package faultbus
