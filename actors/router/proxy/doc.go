// Package proxy is the router's HTTP shell: a reverse proxy in front of
// vLLM-compatible replicas (vLLM or asyncrl's built-in engine), driven by
// the pure routing core in package policy.
//
// Contract:
//   - Every path except /admin/ and /finish_session is forwarded to the
//     replica the core chooses, with the session key taken from
//     X-Session-ID and the other sources of policy.SessionKey (vllm-router's
//     rules; the proxy hands the core its header lookup, h.Get). The
//     response carries X-Asyncrl-Replica: <replica URL>, and
//     X-Asyncrl-Weight-Version-Min/-Max: the oldest and newest version the
//     replica was recorded as serving (policy.SetVersion changes through Router.Apply, the
//     admin API) from routing until the upstream's headers arrived; a
//     streamed answer repeats them as trailers covering the whole stream. Responses stream
//     through with a flush per chunk (SSE works); hop-by-hop headers are
//     stripped both ways; bodies over MaxBodyBytes get 413 with a
//     vLLM-style JSON error.
//   - The client's disconnect cancels the upstream request. A replica that
//     fails mid-response aborts the client connection (the client sees an
//     error, never a silently truncated 200).
//   - A request is retried only if no byte has reached the client, only
//     after a connection failure or a 503, only to a different replica
//     (policy.Request.Avoid), at most MaxRetries times, and only while the
//     retry budget (RetryRatio per request, RetryBurst at most) has a
//     token: retries cannot amplify an outage into a storm.
//   - Health: GET /health every HealthInterval; Policy.FailThreshold consecutive
//     failures (probes or proxied connection failures) mark a replica
//     unhealthy, Policy.RecoverThreshold successful probes mark it healthy
//     (policy.Core.ObserveHealth); the retry budget is policy.RetryBudget.
//     Optional GET /metrics scrapes feed the engine's queue length and KV
//     usage into the core (policy bounded_sticky).
//   - A session held on a replica that is updating (lag rule hold) gets
//     503 with Retry-After; no eligible replica gets 503.
//   - POST /finish_session?session_id=… releases a session (SkyRL).
//   - /admin/ (see Router.admin) lists, adds, removes and drains replicas,
//     looks up sessions and sets the minimum version; it needs AdminToken
//     when set, and New refuses a ListenAddr off loopback without one.
//   - Shutdown refuses new requests with 503, Retry-After and
//     Connection: close (every front alike, before their size, body or
//     anything else is looked at: an oversized one gets 503, not 413;
//     counted as errors_total{kind="shutting_down"}),
//     waits for in-flight ones — a request is in flight from its head
//     on, its body's upload included — then stops the background loops.
//   - asyncrl_router_overhead_seconds is the router's own time on a
//     request: from its body in to its send upstream (routing, retries'
//     routing), and from the answer's head in to the router's head going
//     out; never the client's upload or the replica's answer. Every
//     front starts the clock at the same moment (its body in).
//
// Front ends: Handler is net/http's; Serve runs Config.Front on a
// listener through package front (FrontLoop, the default: event loops
// over epoll; FrontFast: the router's own HTTP/1.1 server, a goroutine
// per connection; FrontNetHTTP: net/http's server). The fronts parse and
// write bytes; this package decides: the Router is their front.Shell
// (serve.go, a pointer conversion), and the one route/retry loop they
// share is forward.go's (forward, relay, and the steps the loop front
// calls one by one: prepare, route, unrouted, sendFailed, retry503,
// answered, answerDone, streamFailed, abandon, endAttempt; forwardFrom
// for a request the loop hands back). Forward and relay are made of the
// same steps, so a front cannot count, retry or label differently.
// net/http's front is this package's own (httpIn, httpOut).
//
// The upstream client (package upstream: the lean HTTP/1.1 client for
// plain-http replicas, used when Config.Transport is nil) reads and
// writes with raw non-blocking system calls (internal/rawio: no
// scheduler hooks, so no sysmon wake-ups). A request upstream that
// leaves in one write waits for readability itself (rawio.WriteAwait),
// so reading its answer does not start with a failed read; a replica
// speaks only in answer.
//
// The core is not goroutine-safe; Router holds one mutex around every
// core call and never holds it across I/O.
package proxy
