// Package transport carries asyncrl's messages between actors and nodes.
//
// Bus is the control-plane interface (publish, subscribe, queue subscribe,
// request/reply, durable streams). Implementations: natsbus (a real NATS
// server, embedded in-process by default or reached by URL) and memhub (an
// in-memory hub with fault injection for deterministic tests). Both pass the
// conformance suite in bustest. Bulk bytes (token batches, weights) move on
// data planes that control messages trigger.
//
// # Delivery guarantees (what actors may rely on)
//
//   - Publish/Subscribe is at-most-once: a message published while nobody
//     listens, or lost to a disconnect or partition, is gone. Anything that
//     must not be lost goes through a Stream.
//   - Messages from one publisher on one subject reach a subscriber in
//     publish order (memhub's reorder fault breaks this on purpose).
//   - A subscription's handler is called sequentially; handlers of different
//     subscriptions may run concurrently (NATS). A handler may block to push
//     back (actors' bridges wait for mailbox room): the bus then holds that
//     subscription's later messages (natsbus: up to Options.PendingMsgs and
//     PendingBytes per subscription, beyond which NATS drops them and
//     natsbus counts and logs them as slow-consumer drops). A handler whose
//     Msg.Inline is set runs inside the publisher's Publish (memhub in auto
//     mode) and must not wait for the publisher.
//   - QueueSubscribe hands each message to exactly one member of the group.
//   - Request fails fast with ErrNoResponders when nobody subscribes, and with
//     ErrTimeout when no reply arrives before ctx's deadline (memhub: its
//     virtual request timeout).
//   - Stream.Publish returns only once the message is stored. Consume is
//     at-least-once: an unacked message is redelivered after ackWait (or at
//     once after Nak), so handlers must be idempotent (use StreamMsg.Sequence).
//     A durable consumer resumes after its acknowledged messages.
//   - Payloads above MaxPayload fail with ErrPayloadTooLarge before sending.
//   - ErrUnavailable: the server answered that it cannot serve the request
//     for now (natsbus: JetStream's 503, e.g. a stream electing a leader;
//     not JetStream missing altogether, which is lasting). memhub never
//     returns it. Transient(err) names the errors a caller may try again a
//     moment later — ErrTimeout, ErrNoResponders, ErrUnavailable — and
//     nothing else (a closed bus, a missing message, a bad subject, a
//     payload too large fail the same way again).
//
// # Subjects
//
// Every subject is asyncrl.<run>.<topic>[.<more>…]. Run ids and tokens are
// letters, digits, '-' and '_'. A run's plan — RunPlan, from Plan(run) —
// spells every subject, stream and bucket name of the run, control subjects
// included; every package takes its names from it and none builds a subject
// by hand. The plan's table (name, kind, messages, publisher, subscribers)
// is in the comment on Topic in subjects.go, generated from the code.
// Request inboxes (_INBOX.…) are outside the scheme; ValidateSubject accepts
// any well-formed subject, ParseSubject only the scheme.
package transport
