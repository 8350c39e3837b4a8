// Package fence is the rank host's pure rule (cluster/rankhost): which
// term's requests a node's rank host serves, and which of the trainer
// groups it hosts for term holders end.
//
// # Contract
//
// A Rule is stepped by one shell at a time (no locks, goroutines, I/O or
// clock inside): Observe for every request (start, frame, kill) before it
// is served and for the node's own new term, Register when a start's
// ranks are up, Remove when a holder's kill ended a group's last rank,
// Departed when membership changes. The shell kills the ranks of every
// group a call returns (Ended) and of a start Register refuses.
//
// Carried out that way, the rule keeps this invariant after every call —
// what cluster/rankhost's Host and the simulator's failover scenario
// (sim/failover_ranks.go, its rank-fencing oracle) rely on:
//
//   - every group the rule holds is of the newest term Observe saw
//     (Token): a request of a newer term ends every older group before it
//     is served, and a start of an older term is refused — by Observe
//     when it arrives, by Register when a newer term arrived while its
//     ranks started;
//   - a holder (Owner) has at most one group: its new group ends its
//     other ones (a kill that overtook a start, or one the bus lost,
//     leaves no ranks behind), and a start that reuses a group id ends
//     what the id named before.
//
// Terms are the trainer lease's (cluster/lease/contender): a token is the
// revision of the Create that began the term, so one token has one
// holder, and a newer token is a later holder. Two terms' groups on one
// host at once are therefore never allowed: at most one group, of the
// newest token, and of its one holder.
package fence
