// Package discovery turns engine announcements on the bus and membership
// events into changes of the router's replica set.
//
// # Contract
//
// Engines announce themselves on asyncrl.<run>.engines.<id>.{health,load,ack}
// (messages.EngineHealth, EngineLoad, EngineVersionAck; Header.Sender is
// the node that hosts the engine); nodes advertise their engines' URLs in
// memberlist metadata (Endpoints "engine", "engine-0", …). Core, a pure
// state machine with time as an input, keeps one record per engine URL and
// emits the changes that make the router's table match what it should be:
//
//   - an engine is in the table while its node is alive (engines on nodes
//     membership never mentioned are taken as alive) and it was announced
//     or advertised;
//   - it is healthy while its last health announcement said so, some
//     announcement (health, load or ack) arrived within StaleAfter, and the
//     version it acknowledged is at least the minimum version;
//   - a node that leaves or dies takes its engines out of the table at
//     once, and forgets their versions: when the node rejoins, its engines
//     come back unhealthy and take traffic only after a fresh announcement
//     and an ack of a version ≥ the minimum version.
//
// Failure-detection bound: a dead node's engines leave routing when
// memberlist declares it dead (a few probe intervals: about 3s with the
// default 500ms probe on a small cluster) or when their announcements stop
// for StaleAfter, whichever comes first; an engine that hangs while its
// node stays alive is unhealthy after StaleAfter.
//
// Changes are applied to the router as typed policy changes with Apply
// (one Router.Apply for a batch, under the router's lock, so a new engine
// is never routable between its Add and its health/version; the router's
// errors come back, and those that leave the table as discovery wants it
// — duplicate add, unknown replica — are dropped). Watcher is the shell: it subscribes to the engine
// subjects and MinVersionSet on the bus, feeds the core and applies the
// changes; the node agent feeds it membership events.
package discovery
