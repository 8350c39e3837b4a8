// Package actors is asyncrl's reusable actor shell: it runs a pure core
// inside a protoactor-go actor and carries out the effects the core asks for.
// It holds no business logic; the role packages (router, filter, trainer,
// publisher, rollout) supply cores and wire them up with Spawn and bridges.
//
// # Core contract
//
// The contract types live in package effect (actors/effect), which imports
// only time, so cores depend on them without depending on this shell; this
// package re-exports them as aliases. docs/cores.md gives the contract for
// every core, actor cores and embedded ones. A Core[In, Out] is a plain struct with Step(now, msg), Tick(now, timer) and
// Drain() Effects[Out]. It never starts goroutines, blocks, locks, does I/O,
// reads the wall clock or uses global randomness: time comes in as an
// argument and a *rand.Rand, if needed, through its constructor. Everything
// it wants done is an Effects value — Sends (subject + concrete message),
// Timers (arm/re-arm/cancel by name, deadline on the shell's clock), Metrics
// (counter/gauge/histogram updates by declared name) and Logs (the shell
// writes them; cores never print). Cores embed Effects[Out] as their outbox.
// An optional Start(now) (Starter) runs once per incarnation before any
// message. The same core runs unchanged under a deterministic simulator:
// Driver steps a core synchronously on a ManualClock, with no actor system,
// firing its timers as Ticks and recording the rest of its effects.
//
// # Shell
//
// Spawn starts one actor per core. For every message (Tell, or a bridge) the
// shell calls Step with the Clock's now, then drains the effects and carries
// them out in this order: logs, metrics (MetricSink), timers (Clock), sends
// (Sender). A timer that fires comes back as a message to the same actor, so
// the core only ever runs on one goroutine at a time, in mailbox order; a
// tick of a timer that was re-armed or cancelled in between is ignored.
// Log lines carry actor, role and run_id fields. protoactor's own slog output
// goes to the same zerolog logger, at Warn and above by default.
//
// # Supervision policy
//
// When a core panics the shell logs the panic with its stack and protoactor
// suspends the mailbox. The System's one-for-one strategy then, using the
// System's Clock (not the wall clock, so tests drive it):
//   - counts the failures of that actor within SupervisionConfig.Window;
//   - if Decider (default: always Restart) says Restart and the count is
//     below MaxFailures, restarts the actor after
//     InitialBackoff·Multiplier^(count-1), jittered by ±Jitter from the
//     injected Rand and capped at MaxBackoff;
//   - on the MaxFailures-th failure within Window (or an Escalate
//     directive) stops the actor and calls OnEscalate(name, err) on its own
//     goroutine, err wrapping ErrEscalated and the panic value;
//   - on a Stop directive stops the actor quietly.
//
// A restart discards the failed core and builds a new one from the factory;
// messages queued behind the failing one are kept, the message that panicked
// is not retried by the shell. Recovering state (the prompt ledger, the
// trajectory buffer, versions) from durable storage is the caller's job: the
// factory, or the new core's Start, should load it (e.g. from JetStream). A
// panicking core never takes the process down.
//
// # Mailbox policy
//
// MailboxCapacity bounds the messages accepted and not yet started. A full
// actor refuses Tell: it returns ErrMailboxFull at once, the refusal is
// counted in asyncrl_actor_mailbox_dropped_total{actor} and logged
// (rate-limited), so a slow actor pushes back on a direct caller. Bridges
// never lose a message to a full mailbox: a subject bridge's handler waits
// until the core takes a message (the actor wakes it through a channel; one
// atomic load per message when nobody waits), so admission slows and the
// bus holds the backlog (asyncrl_actor_mailbox_waits_total{actor},
// _wait_seconds_total; when the bus runs the handler inside the publisher's
// Publish, as memhub's auto mode does, it admits over the bound instead:
// _overflow_total); a stream bridge refuses the message with a delay
// (StreamMsg.NakDelay: 50 ms, doubling with each delivery, at most
// AckWait) so the stream redelivers it once the actor had time to catch
// up, not only after AckWait. Timer ticks and protoactor system messages
// are not counted.
// (protoactor's own bounded mailboxes are not used: their ring buffer rounds
// the capacity up to a power of two, blocks by spinning, or drops the oldest
// message without telling anyone.)
//
// # Bridges
//
// BridgeSubject (plain or queue subscription) and BridgeStream (durable
// consumer, acked after the core stepped the message) decode payloads with a
// caller-provided Decoder and tell the result to a shell; undecodable
// payloads are counted in asyncrl_actor_decode_errors_total{actor,subject}
// and logged, rate-limited, never crashing the actor. BusSender and
// StreamSender are the reverse: Senders that encode and publish a core's
// Send effects. A shell unsubscribes its bridges before it stops.
//
// # Stopping
//
// Shell.Stop unsubscribes bridges, refuses new messages, lets the core step
// what it already accepted, then stops the actor and cancels its timers and
// the context given to its Sender. System.Shutdown stops every shell and the
// actor system. No goroutine of the package outlives Shutdown.
//
// # Rate-limited logging
//
// RateLimiter is the pure rule (one line per key per interval, then a count
// of the suppressed ones); LimitedLogger applies it to a zerolog logger.
package actors
