package proxy

import (
	"errors"
	"testing"

	"github.com/asyncrl/asyncrl/actors/router/policy"
	"github.com/asyncrl/asyncrl/actors/router/routertest"
)

// Apply steps every change of a batch; a refused one is reported (naming
// its replica) and does not stop the ones after it.
func TestApplyReportsEachRefusedChange(t *testing.T) {
	a := routertest.Named(t, "a", nil)
	h := start(t, testConfig(a))
	err := h.r.Apply(policy.SetVersion{URL: "http://gone:1", Version: 2}, policy.SetVersion{URL: a.URL, Version: 7}, policy.RaiseMinVersion{Version: 3})
	var ce *policy.ChangeError
	if !errors.Is(err, policy.ErrUnknownReplica) || !errors.As(err, &ce) || ce.Change.Replica() != "http://gone:1" {
		t.Fatalf("err %v; want a ChangeError for http://gone:1 wrapping ErrUnknownReplica", err)
	}
	if v, _ := h.r.Replica(a.URL); v.Version != 7 {
		t.Errorf("a serves %d; want 7 (the change after the refused one applied)", v.Version)
	}
	if m := h.r.MinVersion(); m != 3 {
		t.Errorf("min version %d; want 3", m)
	}
	if err := h.r.Apply(policy.RaiseMinVersion{Version: 1}); err != nil || h.r.MinVersion() != 3 {
		t.Errorf("lower raise: %v, min %d; want nil, 3", err, h.r.MinVersion())
	}
}
