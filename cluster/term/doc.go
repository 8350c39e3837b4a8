// Package term is the pure core of a cluster node's trainer-lease agent
// (issue 16): every decision `asyncrl node` makes about the trainer lease
// and the term it runs, in the style of etcd-raft's RawNode. It holds the
// lease status and token, the quorum verdict, the durable progress, the
// steps trained and not yet durable, the checkpoints not yet recorded,
// what each rollout node holds in flight, the members' engines with
// their targets and acks, and the term's health (the cluster/termwatch
// core, embedded).
//
// Like every core it has no goroutines, locks, I/O or clock: time is an
// argument, and it imports only the standard library and other cores.
//
// # Contract
//
// One goroutine (the agent's loop, or a simulator) owns a *Core and:
//
//  1. feeds what happened with Step(now, input) — LeaseChanged,
//     QuorumChanged, MembersChanged, ProgressObserved, Stop (node-scoped);
//     ProgressClaimed, NodeRequeued, StaleRequeued, RouterListening,
//     StartPhase, PipelineStarted,
//     Failed, StepTrained, CheckpointSaved, ProgressSaved, SaveFailed,
//     Marked, PromptConsumed, LedgerWrite, Probe, RolloutStatus,
//     EngineTarget, EngineServing (term-scoped: they carry the term's
//     token, and one of another token — a deposed or finished term's late
//     input — is ignored with an Ignored event);
//  2. calls Tick(now) on a timer (the agent: every 100–250 ms), which runs
//     the watch, the announcements (AnnounceEvery) and the LoadWeights
//     resends (ResendEvery);
//  3. reads Ready(): the Effects to apply, in order (ClaimProgress,
//     MarkTrained, RequeueStale (RequeueNode only planted),
//     DeleteTermBucket, StartPipeline,
//     StopPipeline, SaveProgress, Prune, Announce, AbortGroups, AddEngines,
//     RemoveEngines, SendLoadWeights, Finish, Done, StepDown), and the
//     typed Events (for logs — Event.String is the line the node prints —
//     metrics and tests);
//  4. applies them, and calls Advance(). The answers of effects that have
//     one (ClaimProgress → ProgressClaimed, SaveProgress → ProgressSaved or
//     SaveFailed, MarkTrained → Marked, RequeueStale → StaleRequeued,
//     StartPipeline → StartPhase…, RouterListening, PipelineStarted, the
//     steps…) come back as inputs; an effect that fails after its retries
//     comes back as Failed.
//
// Its stories — a term switch, fencing, a dead claimer, a stalled start… —
// are scenario files in testdata/ (inputs in, Ready out; scenario_test.go
// says how to read and rewrite them).
//
// Guarantees (TestPropertyDecisions checks them over random input
// sequences):
//   - a step's prompts are marked trained (MarkTrained) only once its
//     fenced SaveProgress was acknowledged, or, at a claim, for the
//     previous holder's last durable step;
//   - a step is saved only once the durable ledger recorded every one of
//     its prompts consumed (LedgerWrite.Consumed, not just the consumed
//     event: a mark that overtook the write was refused), and only once
//     the marks of every earlier durable step were written (Marked: the
//     durable progress names only its last step's prompts, which the next
//     claim marks) — issue 37;
//   - without the lease nothing lease-scoped is asked for: a lost lease
//     yields StopPipeline and nothing else, and the lost term's late
//     inputs are ignored;
//   - one SaveProgress is outstanding at a time, steps in order, each a
//     step the trainer completed, with the lease's token;
//   - a rollout node that left has each of its groups reported aborted at
//     most once per term; Done comes once;
//   - StopPipeline comes before the StepDown that gives the lease up;
//   - a term that has not started (PipelineStarted) Watch.StartAfter
//     after its claim steps down, its reason naming the last StartPhase
//     and its engines (issue 37).
//
// # Wiring (cluster/node)
//
// The agent made these decisions inside goroutines; on the core its
// branches map as follows (the shell keeps the I/O, its retries and its
// timers):
//
//   - term.go contendOnce: the elector's OnChange → LeaseChanged; the
//     250 ms quorum check → QuorumChanged (from cluster.Quorum, fed by
//     OnJoin/OnLeave/onLeaving); the failed channel → Failed; "stop the
//     pipeline and resign" → StopPipeline + StepDown; a minority that wins
//     the lease → StepDown{quorum}; ctx end (Agent.Stop) → Stop.
//   - term.go train: Progress+Claim → ClaimProgress/ProgressClaimed;
//     markTrained(prev) / RequeueNode / deleteTermBucket → MarkTrained,
//     RequeueStale (answer StaleRequeued: every older term's in-flight
//     prompts, not just Holder's), DeleteTermBucket; "resume from…"
//     and "run complete" → Resumed, RunComplete; New+startWatched →
//     StartPipeline (answer RouterListening, PipelineStarted, Failed);
//     the save loop over n.steps() → StepTrained, and its SaveProgress /
//     markTrained → SaveProgress (answer ProgressSaved/SaveFailed),
//     MarkTrained; saved ≥ steps → StopPipeline, Finish (requeueAll,
//     reportLedger), Done; the ctx-done save → Stop.
//   - checkpoint.go termCkpt: afterStep's upload → CheckpointSaved, its
//     Prune call → Prune; location/recorded → the core's checkpoints; the
//     "no checkpoint past version 0" check is the core's.
//   - agentledger.go mirror: each consumed event → PromptConsumed (the
//     mirror keeps recording the events; its write outcomes → LedgerWrite);
//     promptsOf is the core's.
//   - termhealth.go: probe results → Probe; checkTerm → Tick (the watch
//     runs inside the core; its step-down is TermFailed + StepDown{stalled}).
//   - termcast.go: onStatus → RolloutStatus; reconcile → MembersChanged;
//     abort → AbortGroups (event GroupsRequeued); announce → Announce.
//   - remote.go remoteSet: reconcile/joined/left/retire → MembersChanged
//     with AddEngines/RemoveEngines; dispatch → EngineTarget then
//     SendLoadWeights; the publisher's acks → EngineServing; resend →
//     Tick (ResendEvery).
//   - agent.go watchDone: the progress poll → ProgressObserved (Done).
//
// Wired (cluster/node contend.go, term.go, termstart.go, termcast.go,
// termengines.go): each contention for the lease (contendOnce) has one
// Core, fed the elector's OnChange (LeaseChanged), the quorum's verdict
// when it changes (QuorumChanged) and Stop when the agent stops, and
// stepped by the contention's goroutine, which applies its Ready — the
// lease's effects itself (StepDown: contendOnce returns and resigns),
// each term's through that term's shell (termRun, made at its
// ClaimProgress): the claim, the previous holder's trained marks and
// requeue, the term bucket's deletion, the pipeline's start, the save
// loop, MarkTrained, Prune, run complete (Finish, Done), the watch
// (Probe, LedgerWrite, Tick), the term's announcements, the aborts of a
// departed rollout node's groups, and the term's remote engines (the
// members' engines fed with MembersChanged, AddEngines/RemoveEngines
// applied to the pipeline's remoteSet, the publisher's dispatch fed as
// EngineTarget and its acks as EngineServing, SendLoadWeights sent, the
// resends the core's Tick). The elector, the quorum watch, the mirror,
// the checkpointer, the prober and the publisher report through the
// contention's inbox; a lost lease or quorum also cancels the running
// term's I/O at once (the decision stays the core's). The lease lines
// (lease trainer acquired/lost, lost quorum) are the core's events. The
// agent's watchDone (agent.go) steps a core of its own with
// ProgressObserved, which says when a standby sees the run complete
// (RunComplete, Done).
//
// The e2e tests then assert Events (Kind, Step, Token, Node) instead of
// matching the printed prose.
package term
