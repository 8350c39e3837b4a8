// Package fetchrule is the trainer's rule for a fetch of a referenced
// group batch that the trajectory buffer failed transiently (issue 31: a
// decision in a core the simulator steps). The trainer's StreamSource
// (actors/trainer) runs it on the wall clock; the simulator (sim) steps
// the same rule on its virtual clock.
//
// The rule. A fetch is a series of tries (1, 2, …). After failed try n,
// made when elapsed has passed since try 1 began (an input: the core
// reads no clock):
//
//   - the wait before try n+1 is 100 ms doubling per try, at most 2 s
//     (Backoff);
//   - the fetch gives up when that wait would end past the window —
//     elapsed + wait > RetryFor — so no try starts after the window;
//   - the window is DefaultRetryFor (30 s) when RetryFor is 0, and a
//     RetryFor < 0 gives up at once (one try).
//
// Whether a failure may pass on a second try (transport.Transient) is
// the transport's classification and is the shell's input: the rule is
// consulted only for such a failure. A failure that is not transient (the
// message is gone, the buffer lost with no replica) fails the fetch at
// once. 30 s is as long as a cluster's term watch waits on an unhealthy
// buffer (termwatch UnhealthyAfter): above a JetStream stream's 4–9 s
// leader election, so an election alone never fails a step.
package fetchrule
