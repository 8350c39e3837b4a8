// Package lease elects one holder per singleton role (trainer, publisher,
// staleness controller) with a lease in a JetStream key-value bucket.
//
// # Contract
//
// A lease is one key (the role) in a KV bucket whose TTL (the stream's
// MaxAge) is the lease TTL, with History 1. A contender acquires with
// Create, which succeeds only when the key is absent (never written,
// expired or deleted); the holder renews with Update at the revision it
// last wrote, which fails as soon as anyone else wrote the key or the key
// expired. Two holders at once are therefore impossible on the server
// side: every write is a compare-and-set on the key's last revision.
//
// The holder stops renewing (crash, kill -9, pause, partition) → the key
// expires TTL after its last renewal → a standby, which tries Create every
// RenewInterval, acquires within TTL + RenewInterval of the holder's last
// renewal, plus the server's expiry granularity: nats-server checks MaxAge
// at most every 250ms on a coarse clock, so expect up to ~300ms more (1s
// TTL, 200ms renew: measured 1.0–1.4s on loopback).
//
// On the holder's side leadership is judged conservatively by
// contender.Core (cluster/lease/contender), a pure state machine with an
// injected clock that the simulator's failover scenario steps too: the lease counts as held only
// until (send time of the last successful write) + TTL − Margin. A holder
// whose renewals fail transiently keeps retrying with capped exponential
// backoff but steps down at that local deadline, before the server can
// hand the key to someone else; a holder whose renewal is refused
// (revision mismatch: someone else holds it, or it expired while the
// holder was paused) steps down at once — unless the key still holds the
// holder's own term (holder and token): then the mismatch is an earlier
// renewal of its own that timed out on its side but landed (common under
// delay and loss), and the core adopts the key's revision and renews at
// once without moving its local deadline (contender.Core.Resynced). Likewise a
// Create that timed out here but landed there: the retry's Create is
// refused because the key exists, the key holds the contender's own
// untokened Create, and the core takes that term up with a renewal at its
// revision (contender.Core.Taken, then Renewed) instead of reading it as someone
// else's and letting it expire unrenewed for a TTL.
//
// # Fencing
//
// The fencing token is the KV revision at which the lease was acquired.
// Revisions are the bucket stream's sequence numbers, so every later
// acquisition has a strictly larger token. The holder passes its token
// with every write it makes (trainer progress, ledger); stores remember
// the largest token they have seen and refuse smaller ones
// (contender.CheckFence, contender.ErrFenced), so a deposed holder's late writes are rejected even if it
// has not yet noticed it lost the lease.
//
// Elector is the I/O shell: it runs the core against the bucket, one
// goroutine per Run, reads the key after a refused write for the core to
// judge, and reports the changes the core names (Core.Changed) through
// Config.OnChange. Its configuration and reports use the contender
// package's types (contender.Timing, contender.Status, contender.Holding);
// this package adds no names for them.
package lease
