// Package ledger is the run's durable state in JetStream: the prompt
// ledger, the buffer of finished groups and the trainer's progress.
//
// # Contract
//
// Prompt ledger: one KV entry per prompt (bucket asyncrl_<run>_prompts),
// holding its last messages.PromptLedger. Every transition is validated by
// the pure Apply before it is written, and written with a compare-and-set
// on the entry's revision, so concurrent writers on different nodes cannot
// both win. The legal life of a prompt:
//
//	(absent) ──consume(a)──▶ consumed(a) ──▶ trained(a)   final: never trained twice
//	                              │      ──▶ filtered(a)  final
//	                              └────────▶ requeued(a) ──consume(a' > a)──▶ consumed(a') …
//
// Everything else is an error wrapping ErrIllegalTransition (and a more
// precise sentinel). Re-recording the exact transition already stored is
// a Duplicate outcome, not an error: at-least-once delivery replays.
//
// Group buffer: finished groups are appended to a JetStream stream with
// the group id as message id (JetStream drops a re-append inside the
// duplicate window) and consumed by a durable consumer that acks a group
// only after the handler returned nil, so a consumer killed mid-group gets
// it again.
//
// Progress: the trainer's step, published version and last checkpoint in
// KV (bucket asyncrl_<run>_progress), guarded by the lease's fencing
// token: a write whose token is older than the stored one fails with
// contender.ErrFenced, and a new holder Claims the record with its token
// before it trains, which fences every older holder at once.
//
// All of it survives a process restart when the bus keeps its JetStream
// store (natsbus Options.StoreDir) or runs against a clustered server.
package ledger
