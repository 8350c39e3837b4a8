package scenario

import (
	"path/filepath"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// Walk runs f, as a subtest, for every scenario file (*.txt) under dir.
// Other files are skipped by name: a failed property test (rapid) writes
// its reproduction under testdata/rapid/, which is not a scenario.
func Walk(t *testing.T, dir string, f func(t *testing.T, path string)) {
	datadriven.Walk(t, dir, func(t *testing.T, path string) {
		if filepath.Ext(path) != ".txt" {
			t.Skipf("%s: not a scenario file", path)
		}
		f(t, path)
	})
}
