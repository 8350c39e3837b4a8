// Package golden runs data-driven scenario tests of pure cores: each input
// file under testdata is replayed by a caller-supplied function into a
// transcript, which must equal the .golden file next to it. `go test
// -update` rewrites the golden files instead. Test-only helper.
package golden
