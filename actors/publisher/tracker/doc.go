// Package tracker is the weight publisher's version tracker: a pure core
// that knows which weight versions exist, which version each engine
// serves and is fetching, and from that the minimum version the router may
// route to and how a late joiner catches up.
//
// # Contract
//
// Tracker is a plain struct: no goroutines, channels, locks, I/O, clock or
// randomness; the actor shell serialises calls and carries out what the
// methods return (Commands to send to engines, the new minimum routable
// version for the router, and the settled publishes: Ready). Its shell is actors/publisher's Shell; the
// simulator (sim) and Tinker's version mode (tinker/server) step it too. Bad input from outside (an unknown engine, an
// ack of a version never published, a publish that skips a version) is an
// error and changes nothing; a broken internal invariant panics.
//
//   - Versions: 0 is the base checkpoint; each Publish is target+1. A
//     version may also be available as a full checkpoint (every K versions
//     and on demand) and records its delta and full sizes in bytes.
//   - Per engine: the version it serves only increases. An ack at or below
//     the served version is ignored and counted (IgnoredAcks): late or
//     duplicated acks are normal on a bus that redelivers.
//   - Routing: MinRoutable = max(0, target − MaxLag); an engine is routable
//     once it has acknowledged a version ≥ MinRoutable. With MaxLag 0 (the
//     default) an engine gets traffic only after it acknowledged the newest
//     version.
//   - Catch-up: Plan brings an engine from what it serves to the target by
//     replaying deltas or by loading the newest usable full checkpoint and
//     replaying the deltas after it, whichever moves fewer bytes (deltas win
//     a tie). A joiner with no weights (NoVersion) must load a full
//     checkpoint; version 0 (the base) always is one. A version published
//     NoDelta (Tinker's sampler checkpoints: whole checkpoints, no delta
//     from the one before) is reached only through a full checkpoint at or
//     above it, and must have one.
//   - The router's minimum (RouterMin, Ready.MinVersion): it rises to
//     MinRoutable once some engine serves MinRoutable, after any call
//     (an ack, a join, a publish within MaxLag), never down, so the fleet
//     is never left with no routable engine while the first receiver is
//     still loading.
//   - Settling a publish (Await, PublishAwait, Failed, Ready.Settled): an
//     awaited version settles Routable once some engine serves it or a
//     later one, NoEngine once every engine serves less and failed it
//     (Failed) or none is left. The trainer's publish waits for that.
//     A publish of the target again (PublishAwait) is the trainer's retry
//     of one that failed: the engines that failed it are commanded again,
//     so an engine that was briefly unreachable gets the version.
//
// The shell takes Ready after each call and Advances: it tells the router
// the new minimum (and announces it) and answers the waiting publishes.
// A stepper that awaits nothing (Tinker's version mode) may ignore Ready.
package tracker
