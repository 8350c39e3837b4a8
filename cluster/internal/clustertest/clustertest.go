// Package clustertest holds the test helpers the cluster packages'
// tests share (cluster/node's pipeline tests and cluster/agent's): polling
// a condition with a deadline, the asyncrl binary built once per test,
// free loopback ports, processes with their output captured, an embedded
// bus, the durable-ledger line's check, engines' acks. Imported by tests
// alone.
package clustertest

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/internal/netx"
)

// WaitFor polls cond until it holds or the deadline passes.
func WaitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BuildBinary builds cmd/asyncrl into a temporary directory.
func BuildBinary(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	bin := filepath.Join(t.TempDir(), "asyncrl")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/asyncrl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// FreePorts returns n distinct free loopback ports, drawn below the
// kernel's ephemeral range (netx.FreePorts says why).
func FreePorts(t *testing.T, n int) []int {
	t.Helper()
	out, err := netx.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TorchWorker is the trainer.exec command and environment of the PyTorch
// worker (integrations/torch), or a skip when Debian's python3 lacks
// torch, numpy or cbor2.
func TorchWorker(t *testing.T) ([]string, []string) {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch, numpy, cbor2").Run(); err != nil {
		t.Skipf("%s with torch, numpy and cbor2 is needed for the PyTorch worker: %v", py, err)
	}
	_, file, _, _ := runtime.Caller(0)
	root, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", "..", "..", "integrations", "torch"))
	if err != nil {
		t.Fatal(err)
	}
	return []string{py, "-m", "asyncrl_worker"}, []string{"PYTHONPATH=" + root}
}
