package messages

import "errors"

// Sentinel errors. Every decode failure wraps exactly one of these with %w and
// context (the message kind or column it concerns), so callers branch with
// errors.Is and logs still say what broke.
var (
	// ErrTruncated: the input ends before the frame header or the payload it announces.
	ErrTruncated = errors.New("messages: truncated")
	// ErrBadMagic: the input does not start with the envelope magic bytes.
	ErrBadMagic = errors.New("messages: bad magic")
	// ErrUnknownVersion: the frame's wire version is not one this build speaks.
	ErrUnknownVersion = errors.New("messages: unknown wire version")
	// ErrUnknownType: the frame's type code is not in the registry.
	ErrUnknownType = errors.New("messages: unknown message type")
	// ErrTooLarge: a frame or token batch exceeds the configured size limit.
	ErrTooLarge = errors.New("messages: too large")
	// ErrMalformed: the payload is not a valid encoding of its declared type,
	// or a decoded value breaks an invariant (offsets, column lengths, ...).
	ErrMalformed = errors.New("messages: malformed")
	// ErrWrongKind: DecodeAs found a valid message of a different kind than asked for.
	ErrWrongKind = errors.New("messages: wrong message kind")
)
