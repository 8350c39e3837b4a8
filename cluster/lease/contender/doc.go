// Package contender is the pure core of one lease contender (issue 31):
// the decisions cluster/lease's Elector carries out against a JetStream
// KV bucket, in a package of their own so the simulator (sim's failover
// scenario) steps the same code against its model of the bucket.
//
// # Contract
//
// Core is a state machine with time as an input: no goroutines, locks,
// I/O or wall clock. Its shell calls Due(now) and, when it returns an op,
// makes that KV call and reports the outcome with exactly one of
// Acquired, Taken, Renewed, Refused (or its parts Resynced and Lost) or
// Failed; Tick(now) steps a holder down at its local deadline; Changed
// says when leadership must be reported; Resigned records a deliberate
// delete. What the lease key says is a Holding (Encode and Decode are
// the key's value format), and the verdicts on a refused write are pure
// functions (JudgeRefusal, JudgeTaken) the core applies and a shell may
// use to decide whether to read the key again.
//
// The core's judgments:
//   - Leadership counts only until (send time of the last confirmed write)
//   - TTL − Margin: a holder whose renewals fail steps down before the
//     server can hand the key to anyone else.
//   - A renewal refused while the key still holds this contender's term
//     past the refused revision is its own earlier renewal that timed out
//     here but landed there: the term goes on (Resynced).
//   - A Create refused because the key exists, while the key holds this
//     contender's own Create (untokened, newer than any term it had), is
//     its own earlier Create that timed out here but landed there: the
//     contender confirms the term with a renewal at that revision and
//     holds the lease from the renewal's send time (Taken, then Renewed),
//     instead of waiting a whole TTL for its own key to expire.
//   - CheckFence: a store admits a write only with a token no older than
//     the newest it saw.
package contender
