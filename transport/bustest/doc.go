// Package bustest is the conformance suite every transport.Bus
// implementation must pass: the semantics actors may rely on regardless of
// whether they run over NATS or the in-memory hub.
//
// The suite polls for conditions with a deadline and never sleeps a fixed
// time, so an implementation driven by a virtual clock passes as long as
// something advances that clock (memhub's RunRealtime does).
//
// Use it from an implementation's tests:
//
//	func TestConformance(t *testing.T) {
//		bustest.Run(t, func(t *testing.T) (transport.Bus, func()) {
//			b := newMyBus(t)
//			return b, func() { b.Close() }
//		})
//	}
//
// A bus whose MaxPayload is large makes the oversized-publish case allocate
// that much; configure a small one for the suite.
package bustest
