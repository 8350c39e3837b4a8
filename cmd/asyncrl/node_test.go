package main

import (
	"strings"
	"testing"
)

// Bad input to asyncrl node fails before anything starts, with a message
// that says what to fix.
func TestNodeBadInput(t *testing.T) {
	code, _, errOut := cli(t, "node", "--name", "n1", "--roles", "engine,traner")
	if code != 1 || !strings.Contains(errOut, `unknown role: "traner"`) ||
		!strings.Contains(errOut, "known roles: all, bus, engine, router, rollout, filter, trainer, publisher, controller") {
		t.Errorf("unknown role: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := cli(t, "node", "--roles", "engine"); code != 1 || !strings.Contains(errOut, "--name is required") {
		t.Errorf("no name: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := cli(t, "node", "--name", "n1", "--nats", "nats://127.0.0.1:4222", "--cluster-listen", "127.0.0.1:6222"); code != 1 || !strings.Contains(errOut, "cannot be used with --nats") {
		t.Errorf("--nats with --cluster-listen: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := cli(t, "node", "--name", "n1", "--cluster-listen", "127.0.0.1:6222"); code != 1 || !strings.Contains(errOut, "needs --routes") {
		t.Errorf("--cluster-listen without --routes: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := cli(t, "node", "--name", "n1", "--roles", "tinker", "--tinker-listen", "0.0.0.0:8100"); code != 1 || !strings.Contains(errOut, "--tinker-api-key-file") {
		t.Errorf("tinker role off loopback without a key: code %d, stderr %q", code, errOut)
	}
}

// --help documents every flag.
func TestNodeHelp(t *testing.T) {
	code, out, _ := cli(t, "node", "--help")
	if code != 0 {
		t.Fatalf("code %d", code)
	}
	for _, f := range []string{"--config", "--name", "--roles", "--nats", "--join", "--gossip", "--cluster-listen", "--routes", "--replicas", "--lease-ttl", "--stall-after", "--unhealthy-after", "--steps", "--exit-when-done", "--tinker-listen", "--tinker-api-key-file"} {
		if !strings.Contains(out, f) {
			t.Errorf("--help lacks %s:\n%s", f, out)
		}
	}
}

// Without a GPU or driver the node says so plainly and runs on.
func TestNodeReportsNoGPUAndTrains(t *testing.T) {
	cfgPath := writeFile(t, "run.yaml", "run:\n  data_dir: "+t.TempDir()+"\n  report_dir: "+t.TempDir()+"\n")
	code, out, errOut := cli(t, "node", "--config", cfgPath, "--name", "solo", "--roles", "trainer,engine",
		"--gossip", "127.0.0.1:0", "--steps", "1", "--exit-when-done", "--log-level", "error")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "node solo: gpu: none (") || !strings.Contains(out, "node solo: step 1 version 1") {
		t.Fatalf("stdout lacks the no-GPU line or the step:\n%s", out)
	}
}
