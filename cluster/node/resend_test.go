package node

import (
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/config"
)

// TestControllerResendDefault: the controller re-sends an unanswered
// TrainBatch after 5 s for the in-process and remote trainers, 30 s for an
// exec child (whose steps take tens of seconds).
func TestControllerResendDefault(t *testing.T) {
	for b, want := range map[config.TrainerBackend]time.Duration{
		config.BackendBuiltin: 5 * time.Second,
		config.BackendRemote:  5 * time.Second,
		config.BackendExec:    30 * time.Second,
	} {
		if got := defaultResendTrainAfter(b); got != want {
			t.Errorf("backend %s: resend after %v, want %v", b, got, want)
		}
	}
}
