// Package transport carries asyncrl's messages between actors and nodes.
//
// Bus is the control-plane interface (publish, subscribe, queue subscribe,
// request/reply, durable streams). Implementations: natsbus (a real NATS
// server, embedded in-process by default or reached by URL) and memhub (an
// in-memory hub with fault injection for deterministic tests). Bulk bytes
// (token batches, weights) move on data planes that control messages trigger.
package transport
