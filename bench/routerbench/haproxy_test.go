package routerbench

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// HAProxy in front of the same engines (the routing-quality comparison of
// issue 22): every turn goes through it, every conversation stays on one
// engine (stick table / hash on X-Session-ID), and the replica each
// answer came from is known (X-Asyncrl-Replica from %[srv_name]).
// Skipped where haproxy is not installed (bench/haproxy.sh installs it).
func TestRunAgenticBehindHAProxy(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy not installed")
	}
	ss, wc := smallWorkload(t, 4, 5)
	for _, front := range []string{HAProxyStick, HAProxyChash} {
		t.Run(front, func(t *testing.T) {
			cfg := DefaultConfig(front, 2)
			cfg.Replicas, cfg.TimeScale, cfg.Sessions, cfg.SharedPrefix = 2, 0, ss, wc.PrefixTokens
			cfg.HAProxy = &HAProxyConfig{Binary: bin, Template: "../haproxy/haproxy.cfg.tmpl"}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r, err := RunAgentic(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Requests != 20 || r.PerReplica[0]+r.PerReplica[1] != 20 {
				t.Fatalf("requests %d per replica %v, want 20", r.Requests, r.PerReplica)
			}
			if r.Moved != 0 {
				t.Fatalf("%d conversations changed engine behind %s", r.Moved, front)
			}
			if r.HitRate <= 0 {
				t.Fatalf("hit rate %v", r.HitRate)
			}
		})
	}
}
