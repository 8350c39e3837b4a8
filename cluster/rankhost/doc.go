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
package rankhost
