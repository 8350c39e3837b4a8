// Package loop is the one shell shape for a RawNode-style core (issue 31):
// an Inbox that other goroutines push the core's inputs into, and a Loop,
// the only goroutine that steps the core. Each turn of the loop applies
// the core's Ready until it has nothing more to say (Ready → Advance →
// apply, so an effect's answer stepped during apply is seen in the next
// Ready), then waits for the inbox, a tick or the end of its context:
// inputs are stepped in the order they were pushed, at most Batch of them
// per turn; a tick calls Poll (default: step the inbox, then Tick).
//
// The core is any type with Step(now, in), Tick(now), Ready() and
// Advance() — cluster/term's Core, the trainer's step rule
// (actors/trainer/steprule). The loop owns no decision: what to do with
// an input is the core's, how to carry out an effect is the caller's
// Apply. It reads the wall clock only through Clock, so a test can drive
// it with its own.
//
// Contract: Run returns nil once Done reports true (checked after every
// apply), or ctx.Err() when ctx ends (the inbox is not drained then: a
// caller that must hear the last inputs calls Feed and ApplyAll itself,
// as cluster/node's lease contention does when the node stops). An Inbox
// with a limit blocks Push while full (back-pressure onto the bus's
// delivery goroutine, the trainer's); without one it never blocks (a slow
// loop must not stall the bus's handlers: the term's).
//
// This is the house's shell for cores whose outputs are a Ready. Cores
// with effect.Effects outboxes run under package actors (protoactor, for
// its supervision); embedded cores behind a mutex (router, publisher
// tracker, tinker) stay where their shell serialises them.
package loop
