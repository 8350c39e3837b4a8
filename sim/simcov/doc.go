// Package simcov measures how much of the pure cores the simulator
// reaches (issue 37): it builds package sim's coverage driver
// (TestCoverageDriver) with -coverpkg over the cores, runs N seeds of each
// scenario, reads Go's coverage profile and reports, per core, the
// blocks reached out of the reachable ones, and lists the blocks no seed
// reached.
//
// # What "branch" means here
//
// Go's coverage profile is block based: a block is a maximal run of
// statements entered only at its top — a function body up to its first
// branch, each arm of an if/else, each case clause, a loop body, the code
// after a branch joins. Every arm of every branch is therefore the start
// of a block of its own, and a branch arm is reached exactly when its
// block is. simcov counts blocks (a block's statement count is reported
// too, but the thresholds are on blocks): "branch coverage" is blocks
// reached / reachable blocks, where the reachable blocks are every block
// of the core's files less the ones listed in Unreachable, each with the
// reason no simulated input can reach it (a defensive panic on a broken
// invariant, a String method only a log line would call, a config error
// the simulator's valid configs never produce).
//
// The cores and their files are in Cores. The term and lease cores run
// only in the failover scenario and the other cores only in the others (the worlds
// are disjoint), so one profile over every scenario gives each core's
// coverage under its own scenarios.
//
// The measurement needs the go tool (it runs `go test -coverpkg`): it is
// a developer's tool (make sim-coverage, 5,000 seeds) and a test
// (TestCoreCoverage, a few hundred seeds, in make test) that fails when a
// core's coverage drops below its floor.
package simcov
