package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain: a stopped server leaves no goroutine behind (model workers,
// sample workers, the sweeper, engines, the bus).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
