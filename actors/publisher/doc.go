// Package publisher is the one home of weight publishing: the Publisher
// interface a trainer publishes each new version through, the Weights it
// hands over, and the Shell that serialises calls into the pure version
// Tracker (package actors/publisher/tracker, the core the simulator and
// Tinker's version mode step) and carries out what the tracker decides.
//
// # Contract
//
//   - Publisher.Publish(ctx, Weights, version) makes version live: the
//     trainer actor calls it once per version, in order, and once more with
//     the same version after a failure (the trainer does not acknowledge a
//     step whose publish failed; its step rule tries again with backoff,
//     publisher.attempts times in all, before the run ends on it). A
//     retry of a version that reached some engine meanwhile succeeds.
//     cluster/weightsync's Sync is the Publisher of a run over the
//     Shell; BusPublisher (bus.go) a remote
//     trainer worker's: it writes each version's serving checkpoint to a
//     directory the engines' node reads, announces it with
//     WeightsPublished and returns once an EngineVersionAck for it
//     arrives.
//
// The Shell:
//
//   - Join registers an engine (name, URL, served version) with the
//     tracker and tells the Router the engine's version.
//   - Publish records a new version (or, for the newest version again,
//     retries a publish that failed: the engines that failed it are
//     commanded again), hands every engine behind it a Command through
//     the Dispatcher (which must not block: each engine's receiver
//     fetches, applies, pauses, loads, resumes on its own), and
//     waits until the tracker settles the version: routable on at least
//     one engine (nil), or out of reach of every engine — each failed it
//     or left — (ErrNoEngine), or until ctx ends.
//   - Acks arrive as messages.EngineVersionAck on the bus (Config.Acks) or
//     through Ack. Each new ack tells the Router the engine's version.
//     The tracker decides when the Router's minimum version rises (to its
//     MinRoutable once some engine serves it, so a request is never
//     routed to an engine below the minimum and the fleet is never left
//     with no routable engine while the first receiver is still loading);
//     the shell carries out each rise (Router.SetMinVersion) and, with
//     Config.MinVersion set, publishes it as a messages.MinVersionSet
//     (for observers and routers elsewhere).
//   - Failed records that an engine could not reach a version (it stays
//     out of rotation until a later ack); Leave forgets an engine (it was
//     stopped).
//
// Both decisions — the minimum's rise and a publish's outcome — are the
// tracker's (its Ready), so the simulator steps them; the shell holds no
// decision of its own (internal/archtest checks it).
//
// The shell owns no goroutine: the bus delivers acks on its own, and every
// method takes one mutex around the tracker.
package publisher
