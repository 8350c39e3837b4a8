// Package rankhost spreads a trainer worker group over several `asyncrl
// node` processes (trainer.exec_nodes, docs/protocol.md "Multi-node
// groups").
//
// # Contract
//
// Host runs on every node with the trainer role of a run whose trainer
// group spans nodes. It answers requests on the base run's
// RankHost(node) subject: start ranks (the node's own trainer.exec and
// exec_env, never a command from the wire, with torch's rank environment
// for the Init.group it is given), relay one frame to a rank and back
// (bridge.Child.Relay), and kill a group. Its ranks die with this node
// (bridge.StartChild's parent-death signal) and are killed when:
//
//   - the holder asks (the Supervisor drops or closes the group);
//   - a start from a newer term (a higher fencing token) arrives — a
//     deposed holder's ranks are gone before the new holder's group
//     exists here, and a start or frame of an older term is refused;
//   - the holder that started them is no longer a live member (Alive),
//     checked every second: a holder SIGKILLed mid-step cannot ask.
//
// Links is the holder's side, a bridge.RemoteRanks: it picks the nodes
// (Pick, in its order: the agent lists the other live trainer-role nodes
// by name), asks each to start its share of the ranks, and carries each
// rank's frames as one bus request per frame (bridge.RankLink). A frame
// larger than the bus's max payload is refused with the sizes. A node
// that leaves membership while a frame is in flight fails that rank's
// call at once (bridge.ErrChildExited), so the group restarts instead of
// waiting for the step timeout.
//
// The rule the Host carries out — which term is served, which hosted
// groups end — is cluster/rankhost/fence's (fence.Rule): after every
// request at most one group runs here, of the newest term seen.
//
// # A request's token is trusted as sent, and why that is safe
//
// The Host ends every group of an older term on the first request of a
// newer one, so a request whose token were newer than the lease holder's
// would end the holder's ranks. No node but the holder can send one:
//
//   - A request's token is LinksConfig.Token, set once per term by the
//     lease agent (cluster/agent setRankLinks, from the StartPipeline of
//     its cluster/term core), and the term core's token is the one its
//     own elector reported (LeaseChanged): the revision at which that
//     elector's own Create landed — contender.Core.Acquired, or Taken
//     when contender.JudgeTaken finds the key holds this very elector's
//     Create (holder and instance). Nothing reads a token from the wire,
//     the configuration or another node.
//   - The lease key's revisions only grow, and a Create lands only when
//     the key is absent, so the holder's term began at the latest Create
//     that landed: its token is the newest any node was ever issued. A
//     node that is not the holder (deposed, a zombie, restarted, a
//     standby) holds a token from an earlier Create, strictly older; its
//     requests are refused once the host has seen the holder's, and can
//     end no group of the holder's.
//
// This rests on two things outside this package, as every fence of the
// cluster does (the durable progress's CheckFence too): every process
// that may publish on RankHost subjects is an asyncrl node running this
// code (the bus's per-role permissions, cluster/access: only nodes with a
// pipeline role — those that may contend for the trainer lease — may
// publish on a run's subjects; an engine, rollout, bus or Tinker node may
// not; a process with a trainer node's credentials can send anything,
// the lease key included), and the lease bucket is never
// deleted and recreated (its revisions, so the tokens, would start again
// at 1). The simulator checks the first point: its failover scenario's
// rank-fencing oracle fails a run if a rank host ever gets a request
// whose token the lease did not issue to the request's sender
// (sim/failover_ranks.go).
package rankhost
