// Package policy is the router's pure routing core: given the replica set,
// their health, serving state, weight versions and load, it decides which
// inference replica each request goes to, and keeps the session table.
//
// Contract: Core is a plain struct. It starts no goroutines, takes no
// locks, does no I/O, never reads the wall clock and never uses global
// randomness: time (now) and a *rand.Rand are inputs, so a simulator can
// replay it deterministically. It is not safe for concurrent use; the
// HTTP proxy (package proxy) serialises calls with a mutex. Expected
// outcomes (no replica can take the request, a session must wait for its
// replica to catch up) are Decision outcomes, never errors or panics.
//
// # Policies
//
//   - consistent_hash: VirtualNodes (160) points per replica on a 64-bit
//     ring; point i of replica u sits at RingHash("u#i"), the key at
//     RingHash(key), where RingHash = FNV-1a-64 then the murmur3 fmix64
//     finaliser (FNV alone clusters the points of URLs differing in one
//     byte). A request goes to the first point ≥ hash(key),
//     wrapping. HashFallback says where a key goes when that point's
//     replica may not take it: "walk" (default) skips to the NEXT point,
//     so the load of a dead replica is spread over the ring; "first_healthy"
//     is vllm-router's fallback (src/policies/consistent_hash.rs): the
//     first replica, in URL order (vllm-router: registration order), that
//     may — one hot spot. Sessions are recorded only for bookkeeping
//     (counts, lookup, outcome).
//   - sticky_least_loaded: SkyRL semantics. Load = sessions per replica.
//     A new session goes to the eligible replica with the fewest sessions,
//     ties to the highest mix64(FNV-1a-64("session_id:url")) (rendezvous). An
//     existing session stays (last access refreshed); stickiness breaks
//     only when its replica is unhealthy or removed (mapping dropped,
//     count decremented, session placed again). Finish releases; sessions
//     idle longer than SessionTTL (7200 s) are swept, at most every
//     SweepInterval (60 s). No key → least-sessions replica, not tracked.
//   - bounded_sticky (default): sticky with bounded loads, below.
//   - round_robin and least_request (fewest in-flight requests): baselines
//     that track no sessions.
//
// # bounded_sticky
//
// Why: sticky routing keeps a trajectory's KV cache warm (each turn's
// prompt extends the previous one), but pure stickiness lets a few long
// multi-turn sessions pile onto one replica. Consistent hashing with
// bounded loads (Mirrokni, Thorup, Zadimoghaddam, SODA 2018) keeps
// locality while capping every bin at c × the average: with c = 1.25 at
// most a bounded fraction of sessions ever moves, and no replica is a hot
// spot. We apply the bound to two loads over the replicas that may take
// new sessions (E, n = |E|):
//
//   - sessions: cap = ⌈c · Σ sessions / n⌉;
//   - work, in token-equivalents: load(r) = in-flight tokens the router
//     sent to r (prompt + expected decode, until Done) + QueueTokens ×
//     the engine's waiting queue + KVTokens × its KV usage (0–1), the last
//     two only if scraped ≤ MetricsMaxAge (1 s) ago. Router-local tokens
//     react instantly to our own decisions; the engine's numbers see work
//     from other routers and the true KV pressure, but go stale fast.
//
// Work counts what the engine must still compute: a sticky hit is
// charged only its prompt beyond the session's history (the previous
// prompt plus its expected reply, which the replica holds in KV cache),
// a new or moved session its whole prompt. Counting cached history as
// work made a replica whose conversations were long look overloaded.
//
// New session: among replicas in E whose sessions + 1 ≤ cap, the fewest
// sessions (SkyRL's count), then the least work, then the highest
// rendezvous weight. Why count first: when 32 equal-length conversations
// arrive together, work-first placement let the replica whose first
// prompts happened to be short take a ninth session while another kept
// seven, and at 1× KV the ninth overflowed its cache (−4 to −7 % in
// exactly those runs, BENCHMARKS.md). Counts are the lasting load (each
// session's KV footprint and batch slot for all its turns); the first
// turns' work is transient, so it only breaks ties.
//
// Existing session on r: it may move only if r's sessions > cap or r's
// work > c × average work (the bound), AND the move is worth it:
//
//   - a target t in E \ {r} with sessions + 1 ≤ cap and, when only the
//     work bound was broken, work + this request's tokens ≤ c × average
//     (no new hot spot) and sessions + 1 < r's sessions (a move for work
//     between equally populated replicas trades a transient queue for a
//     lasting imbalance);
//   - work(r) − work(t) ≥ MoveCost × the session's history on r (capped
//     by this prompt): the queueing saved must exceed the re-prefill the
//     move causes. This is what stops moves as the fleet drains: when
//     conversations finish, the averages fall and r looks over the bound,
//     but its queue is short while the history (~12k tokens at turn 40)
//     is long. MoveCost = 0 restores the unconditional move.
//
// Among targets, the one holding the longest run of the prompt's leading
// prefix blocks wins (Request.PrefixBlocks: each replica keeps an LRU,
// PrefixCacheEntries, of the block hashes the router sent there, like an
// engine's prefix-cache block hashes): the n samples of a GRPO group
// share their prompt blocks, so a sibling's replica already has them; a
// system prompt every conversation shares matches everywhere for the same
// few blocks and so decides nothing. Then least work, fewest sessions,
// rendezvous. If no t qualifies the session stays. A draining replica is
// never balanced: it keeps its sessions until they end.
//
// A session whose replica failed, lags (lag rule move) or must be avoided
// for a retry is placed by the same preference: a replica in E that holds
// some of its prefix blocks, within the session cap (counting the
// session) and the work bound; if none holds any, like a new session.
//
// After every bounded_sticky decision the chosen replica (when in E) holds
// at most ⌈c · avg⌉ ≤ c · avg + 1 sessions, with one exception: a sticky
// hit whose move was not worth it (MoveCost > 0) stays over the bound,
// because the bound is a means (balanced batches and KV), and re-prefilling
// a long history to meet it costs more than the imbalance. New, moved and
// spilled sessions, and sticky hits with nothing cached to lose, always
// meet it; the property tests check both.
//
// # Version gating and replica states
//
// Two versions gate traffic: MinVersion, the hard minimum the publisher
// sets (MinVersionSet: no request ever goes to a replica below it), and
// the newest version any replica acknowledged; a replica's lag is newest −
// its version. Under VersionRule "staleness" (default, issue 15) a
// replica takes new sessions (and untracked requests) only while it is
// healthy, Active, ≥ MinVersion and up to date — unless no up-to-date
// replica can take them, when any within the budget may. Existing
// sessions stay on a healthy Active or Draining replica at ≥ MinVersion
// whose lag ≤ MaxVersionLag (the staleness budget; the run wires
// trainer.max_staleness_steps): SkyRL never breaks stickiness for a
// version, and with delta sync the replicas ack a publish at staggered
// times, so moving sessions off the ones still loading drained their KV
// caches and piled sessions onto the first one updated (BENCHMARKS.md).
// A lagging replica is not balanced (like a draining one). VersionRule
// "newest" is the rule before: budget 0. A session whose replica is
// healthy but Paused, Updating, behind MinVersion or beyond the budget
// follows LagRule: "move" places it again now (KV cache lost, no wait); "hold"
// answers OutcomeGated ("retry later": the proxy returns 503 with
// Retry-After) until the replica catches up, keeping the cache — right
// when weight syncs are short and prefixes long. A session on an
// unhealthy or removed replica always moves. With no eligible replica the
// outcome is OutcomeNoReplica.
//
// # Session keys
//
// SessionKey implements vllm-router's key priority (src/policies/
// hash_key.rs) over a header lookup and the body bytes; a body-text key is
// HashOnly: consistent_hash places by it, sticky policies treat the
// request as untracked. The core never imports net/http: the proxy passes
// its header lookup.
package policy
