// Package transition is the durable prompt ledger's transition rule, a
// pure function: Apply validates one messages.PromptLedger event against
// a prompt's stored entry and says what to store. cluster/ledger applies
// it before every compare-and-set write (and re-exports its names); the
// simulator's failover scenario applies it to its model of the ledger, so
// a transition the real ledger would refuse is refused there too.
//
// The legal life of a prompt:
//
//	(absent) ──consume(a)──▶ consumed(a) ──▶ trained(a)   final: never trained twice
//	                              │      ──▶ filtered(a)  final
//	                              └────────▶ requeued(a) ──consume(a' > a)──▶ consumed(a') …
//
// Everything else is an error wrapping ErrIllegalTransition and a more
// precise sentinel; re-recording the stored transition is Duplicate.
// No I/O, no clock; it imports only the standard library and messages.
package transition
