package actors

import "errors"

// Sentinel errors; functions wrap them with context.
var (
	// ErrMailboxFull is returned by Tell when the actor already has
	// MailboxCapacity messages queued; the message was not accepted.
	ErrMailboxFull = errors.New("actors: mailbox full")
	// ErrStopped is returned when telling or bridging to a stopped actor.
	ErrStopped = errors.New("actors: actor stopped")
	// ErrBridgeStopped ends a bridge handler's wait for mailbox room when
	// the bridge was stopped meanwhile.
	ErrBridgeStopped = errors.New("actors: bridge stopped")
	// ErrEscalated wraps the failure passed to OnEscalate when an actor
	// failed too often (or its Decider said Escalate) and was stopped.
	ErrEscalated = errors.New("actors: failure escalated")
	// ErrPanic wraps a non-error panic value raised by a core.
	ErrPanic = errors.New("actors: core panicked")
	// ErrNoSender is logged when a core emits a Send and the shell has no Sender.
	ErrNoSender = errors.New("actors: no sender configured")
	// ErrInvalidConfig wraps configuration validation failures.
	ErrInvalidConfig = errors.New("actors: invalid config")
)
