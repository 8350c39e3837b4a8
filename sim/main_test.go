package sim

import (
	"testing"

	"go.uber.org/goleak"
)

// The simulator is single-goroutine by contract: nothing may be left
// running after a run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
