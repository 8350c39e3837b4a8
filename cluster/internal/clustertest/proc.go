package clustertest

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/internal/syncbuf"
)

// Proc is a process a test started, its output captured.
type Proc struct {
	Cmd         *exec.Cmd
	Out, ErrOut *syncbuf.Buffer
	// Exited is closed once the process was waited for.
	Exited chan struct{}
}

// StartProc starts cmd with its output captured. At the end of the test
// it is stopped (SIGTERM, then SIGKILL after 20 s) and, if the test
// failed, its output is logged under name (stderr's last 15 lines).
func StartProc(t *testing.T, cmd *exec.Cmd, name string) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, Out: &syncbuf.Buffer{}, ErrOut: &syncbuf.Buffer{}, Exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Out, p.ErrOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.Exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.Exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-p.Exited
		}
		if t.Failed() {
			t.Logf("%s stdout:\n%s\nstderr (tail):\n%s", name, p.Out.String(), LastLines(p.ErrOut.String(), 15))
		}
	})
	return p
}

// LastLines is s's last n lines.
func LastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}
