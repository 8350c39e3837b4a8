// Package status is what `asyncrl status` shows: a running cluster's
// members, trainer lease holder, term, step, engines with the versions
// they serve, and the groups in flight, read from the bus without adding
// anything to it.
//
// # Contract
//
// View is the pure core: it is fed what the bus said — the name claims
// (members), the trainer lease, the fenced durable progress (all three
// read from JetStream KV), and the run's messages (TermAnnounce on the
// base run's plan; StepDone, EngineHealth, EngineLoad, EngineVersionAck,
// RolloutStatus and CapacityChanged on the announced term's plan) — each
// with the time it was seen, and Snapshot(now) returns a plain Snapshot.
// Render turns a Snapshot into the text the command prints. Neither has
// goroutines, locks, I/O or a clock: the same inputs give the same text.
//
// Only the newest term counts: a TermAnnounce with a larger fencing token
// than the one followed switches the view to that term and forgets the old
// term's engines, rollout reports and steps; messages of any other term
// (a deposed holder's late ones) are ignored.
//
// Watcher is the shell: it subscribes to the base run's TermAnnounce and,
// for the term it names, to the term's steps, capacity, engine
// announcements and rollout reports, polls the three KV buckets on
// Poll, and feeds the View under a mutex. It only reads: it creates no
// stream, bucket or consumer, so a user allowed to subscribe and read KV
// can run it.
//
// Where the state lives (every name from transport.Plan, except the two
// cluster-wide buckets): members are the live keys of cluster.NamesBucket
// (one per node name, expiring TTL after its node died); the trainer lease
// is key "<run>-trainer" of lease.DefaultBucket; the durable step is
// ledger.ProgressKey of the run's ProgressBucket.
package status
