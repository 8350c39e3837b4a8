//go:build race

package bridge

// raceEnabled: the suite runs under the race detector (make test runs
// actors/... twice, plain and -race).
const raceEnabled = true
