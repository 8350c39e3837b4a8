package model

import (
	"testing"

	"go.uber.org/goleak"
)

// Trainer.Step starts worker goroutines when Workers > 1; none may outlive it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
