// Package upstream is the router's lean HTTP/1.1 client for plain-http
// replicas (used when the proxy has no Transport configured): a request
// is written and its answer read on the caller's goroutine, over a pooled
// keep-alive connection. net/http's Transport hands every request to two
// goroutines per connection (writeLoop, readLoop) and back over channels;
// on the router's hop those switches and their wake-ups cost about as much
// as the syscalls.
//
// Contract:
//   - Client.RoundTrip sends one request with its whole body (already in
//     memory) and returns the answer as soon as its head is read; the body
//     streams from the connection as the replica writes it.
//   - Keep-alive: the connection goes back to the pool (at most
//     Client.MaxIdle idle connections per host) only when the answer's
//     body was read to its end without error, the replica did not ask to
//     close, and the request was not cancelled; otherwise it is closed.
//   - Cancellation: ctx ending aborts the connection's reads and writes
//     (through AfterFunc, no goroutine); RoundTrip then returns
//     context.Cause(ctx).
//   - One replay: a reused idle connection that turns out closed before any
//     byte of the answer (ErrNoAnswer) is retried once on a fresh
//     connection — the body is in memory, so it is replayed exactly; the
//     Transport does the same for a request with GetBody. Nothing else is
//     retried here: the proxy's route/retry loop decides.
//   - Interim 1xx answers (other than 101) are skipped. A plain answer with
//     a Content-Length is read without http.ReadResponse (its head parsed
//     in place by internal/h1, resp.Header left nil: Header and LeanHead
//     read it); a body that ends early is io.ErrUnexpectedEOF, never a
//     clean EOF.
//   - The caller's HeaderWriter writes the end-to-end headers; the client
//     writes the request line, Host and Content-Length itself.
//   - Connections read and write with raw non-blocking system calls
//     (internal/rawio). The request's last write waits for readability
//     (rawio.WriteAwait), so reading the answer does not start with a
//     failed read: a replica speaks only in answer.
//
// The router's loop front (actors/router/front, loop_linux.go) dials with
// Client.Dialer and keeps its own pool of the same size; an exchange it
// hands back to a goroutine continues on a Conn (NewConn with the bytes
// of the answer already read, then Client.TrackBody).
package upstream
