// Package termwatch is the pure core that keeps a cluster term from
// stalling silently (issue 20). The trainer lease's holder feeds it every
// completed step and the result of each probe of the JetStream state the
// term depends on (its trajectory buffer, the durable ledger, the lease
// bucket), and when the term started; on Tick it decides whether the term
// is healthy, degraded (a dependency failing, shown as an event), or must
// step down: not started Config.StartAfter after its claim (issue 37: a
// term whose engines never followed it sat on the lease), no step for
// Config.StallAfter, or a dependency failing every probe for
// Config.UnhealthyAfter. Stepping down gives the lease up, so a standby
// (or the same node) starts a clean term from the durable step.
//
// Like every core it has no goroutines, locks, I/O or clock: time is an
// argument, and the effects are events read with Ready.
package termwatch
