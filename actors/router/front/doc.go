// Package front is the router's HTTP front ends: the servers that read
// clients' requests and write their answers, beside the routing shell
// (package proxy) that decides where each request goes. A front parses
// and writes bytes; every decision — the replica, a retry, a health
// observation, the version headers, a metric — is the shell's, reached
// through the Shell interface (shell.go), which proxy's Router
// implements. Package front never imports proxy.
//
// Contract:
//   - Server.Serve(ln, mode) runs one front on ln until Server.Stop; it
//     then returns http.ErrServerClosed.
//   - Loop (loop_linux.go, the default) runs an event loop per P over
//     one epoll set each: the plain exchange (GET or POST with a
//     Content-Length body to a plain-http replica, a Content-Length
//     answer of at most Config.LoopMaxAnswer, 1 MiB by default, that is
//     not an event stream) is served without a goroutine switch,
//     stepping the shell's route/retry loop (Shell's loop steps, which
//     never block). Anything else leaves the loop with the bytes already
//     read for the fast front's path: a fastConn, or serveAdopted on a
//     goroutine for an answer that streams (relayed by Shell.Relay) or
//     a request routed to a replica that is not plain http (sent by
//     Shell.Resume, forward's loop from that decision on). Off Linux,
//     and when the shell has no lean upstream client (Config.Upstream
//     nil), Loop is Fast.
//   - Fast (server.go, conn.go, out.go) reads plain HTTP/1.1 requests
//     itself (internal/h1) on a goroutine per connection, hands each to
//     Shell.Forward, and relays answers as bytes (a small answer's head
//     and body in one write; streamed ones re-chunked and flushed per
//     chunk, with the version trailers). It hands everything else
//     (/admin/, /finish_session, chunked or Expect requests, HTTP/1.0,
//     odd or oversized heads) to net/http's server, serving
//     Config.Handler, on the same connection (handoff.go).
//   - NetHTTP serves Config.Handler with net/http's server.
//   - A fast front watches for a client disconnect only once a request
//     has waited watchDelay (100 ms) on its replica (the loop: a
//     half-close noticed then; a reset at once); it sets no per-request
//     deadlines: connections that waited for (or trickled) their next
//     request head longer than Config.IdleTimeout (default 2 min) are
//     closed, never a request being served.
//   - Both read and write with raw non-blocking system calls
//     (internal/rawio: no scheduler hooks, so no sysmon wake-ups).
//     Answers to clients are plain writes: a client may pipeline or
//     half-close while its request is served.
//   - Every front admits a request (Shell.Enter) once its head is in,
//     before its size (413), body or anything else about it is looked
//     at, and answers a refused one with Shell.Refuse and closes the
//     connection: a router shutting down answers every new request
//     alike. The overhead clock (Shell.Forward's start; the loop's
//     lconn.start) starts once the body is in, on every front.
//   - Every admitted request (Shell.Enter) is ended by one Shell.Leave,
//     and every attempt Shell.Route opened is closed once (Shell's doc
//     says by what), whichever path the request takes — a client gone,
//     or a connection Stop cuts, inside the body included.
//
// The hot path costs one interface call per shell step (a request on
// the loop: Enter, Prepare, Route, Answered, Done, Leave) and no
// allocation for it: the fronts pass themselves (*fastConn, *lconn) as
// the Inbound, Answer, Failer or Headers, and the Router is the Shell
// by a pointer conversion (bench/results/fronts.md).
package front
