// Package memhub is an in-memory transport.Bus hub for deterministic tests
// and simulation, with fault injection.
//
//	hub := memhub.New(seed)
//	a, b := hub.Connect("node-a"), hub.Connect("node-b") // a transport.Bus per node
//
// # Delivery model
//
// Nothing is delivered by a background goroutine. Publishing queues one
// delivery per matching subscription (one member per queue group), each due
// at a virtual time; a driver delivers them in (due time, queue order),
// one at a time, on the goroutine that calls it:
//
//   - Step delivers the next item due now; Drain delivers everything due now
//     (including what handlers publish meanwhile) and releases partial
//     reorder windows; Advance(d) moves the virtual clock forward, delivering
//     and firing timers (request timeouts, stream ack-waits) at their times.
//   - SetAuto(true) is the "deliver everything now" mode: each Publish,
//     Request, stream publish and Consume drains before returning.
//   - RunRealtime lets the virtual clock follow the wall clock (used by the
//     conformance suite; not deterministic).
//
// Handlers are never called concurrently. Do not call drivers or Request
// from inside a handler (the handler's own run holds the turn). In auto mode
// a handler runs on the publisher's goroutine, inside its Publish, and its
// message carries transport.Msg.Inline: it must not block waiting for the
// publisher (actors' bridges then admit over the mailbox bound rather than
// wait, so an actor publishing to its own full mailbox cannot deadlock).
// Driven runs (Step, Drain, Advance, RunRealtime) are not inline.
//
// # Faults
//
// AddFault installs Drop, Delay (fixed or uniformly random up to d),
// Duplicate and Reorder (shuffle a window) rules, each selected by a NATS
// subject pattern and by source and destination node, with an optional
// probability. Partition splits nodes into groups that cannot reach each
// other until Heal. Faults apply per delivery (message × subscription) to
// core messages, requests and replies; stream storage and delivery to
// durable consumers are never faulted (JetStream is replicated state).
//
// # Determinism
//
// Every random choice (probabilities, random delays, shuffles, queue-group
// picks) comes from one *rand.Rand seeded by New, and every event is
// recorded in a log (Events, EventLog, Count). The same seed and the same
// sequence of calls from one goroutine produce an identical log.
//
// # Streams
//
// Streams are hub-wide in-memory logs (MaxAge in virtual time, MaxBytes).
// A durable consumer keeps its ack state across Consume calls; an unacked
// message is redelivered after ackWait of virtual time or at once after Nak.
// As in JetStream, a core Publish on a stream's subject is stored, and a
// stream publish also reaches plain subscribers.
package memhub
