// Package natsbus implements transport.Bus over NATS.
//
// Connect with an empty Options.URL starts an embedded nats-server in this
// process: it listens on 127.0.0.1 on a random port, has JetStream enabled
// with its store in Options.StoreDir (or a fresh temporary directory that
// Close removes), handles no signals, and logs nothing unless Options.Logger
// is enabled for debug, in which case server logs are bridged to it at
// debug level. ClientURL is what child processes and other nodes dial.
// With a URL, Connect dials that server instead and adopts its advertised
// max_payload.
//
// Contract beyond transport.Bus:
//   - Publishes above MaxPayload fail with transport.ErrPayloadTooLarge naming
//     both sizes, before anything is sent.
//   - Request maps "no responders" to transport.ErrNoResponders and deadline
//     expiry to transport.ErrTimeout (both wrap the NATS error).
//   - Stream creates or updates a JetStream stream (file storage unless
//     StreamConfig.Memory). Stream.Publish waits for JetStream's ack.
//     Consume uses a durable pull consumer with AckExplicit and the given
//     AckWait; its Unsubscribe waits until the handler has returned.
//   - Close stops consumers, drains the connection, shuts the embedded server
//     down (WaitForShutdown) and removes a temporary store, leaving no
//     goroutines behind.
//   - Options.Cluster joins the embedded server to a route cluster (clustered
//     JetStream: give each member a distinct Name and the full route list).
//
// The client reconnects forever by default (Options.MaxReconnects) so a
// long run survives a server restart; core messages sent while disconnected
// may be lost, stream messages are not (Publish fails instead).
package natsbus
