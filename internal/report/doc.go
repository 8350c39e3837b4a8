// Package report writes a run's report: summary.json (Summary, stable
// keys read by scripts and tests), report.html and three PNG plots drawn
// with gonum.org/v1/plot — the reward per step, the staleness histogram of
// trained groups and the trainer throughput per step. Files are written
// through a temporary name and renamed, so a reader never sees half a
// report.
package report
