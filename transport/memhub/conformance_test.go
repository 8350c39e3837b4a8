package memhub_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/bustest"
	"github.com/asyncrl/asyncrl/transport/memhub"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The hub passes the shared suite in auto mode with its clock following the
// wall clock, which is how code written against real NATS sees it.
func TestConformance(t *testing.T) {
	bustest.Run(t, func(t *testing.T) (transport.Bus, func()) {
		h := memhub.New(1)
		h.SetAuto(true)
		h.SetMaxPayload(64 << 10)
		stop := h.RunRealtime(time.Millisecond)
		b := h.Connect("node-a")
		return b, func() {
			stop()
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	})
}

// Manual mode too, with the realtime driver doing all delivery.
func TestConformanceManual(t *testing.T) {
	bustest.Run(t, func(t *testing.T) (transport.Bus, func()) {
		h := memhub.New(2)
		stop := h.RunRealtime(time.Millisecond)
		b := h.Connect("node-a")
		return b, func() { stop(); _ = b.Close() }
	})
}
