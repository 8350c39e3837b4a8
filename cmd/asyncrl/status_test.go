package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// Bad input to asyncrl status fails with a message that says what to fix.
func TestStatusBadInput(t *testing.T) {
	if code, _, errOut := cli(t, "status", "--once"); code != 1 || !strings.Contains(errOut, "--nats is required") {
		t.Errorf("no --nats: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := cli(t, "status", "--nats", "nats://127.0.0.1:1", "--once"); code != 1 || !strings.Contains(errOut, "connect to nats://127.0.0.1:1") {
		t.Errorf("nothing listening: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := cli(t, "status", "--nats", "nats://127.0.0.1:1", "--once", "--nats-password-file", "/nonexistent/pw"); code != 1 || !strings.Contains(errOut, "bus.password_file") {
		t.Errorf("missing password file: code %d, stderr %q", code, errOut)
	}
}

var (
	statusLeaseRE = regexp.MustCompile(`(?m)^lease +trainer lease held by (\S+) \(token (\d+)\)$`)
	statusTermRE  = regexp.MustCompile(`(?m)^term +(local-t(\d+)) \(token (\d+)\) by (\S+), router http://127\.0\.0\.1:\d+,`)
	statusStepRE  = regexp.MustCompile(`(?m)^step +.*durable step (\d+) version (\d+) by (\S+) \(token (\d+)\)`)
	statusEngRE   = regexp.MustCompile(`(?m)^  (\S+) +solo +v(\d+) +`)
)

// A real node on an external NATS server, and asyncrl status --once
// against that server: it names the node as member and lease holder, the
// term the node announces (whose token is the lease's), the durable step
// the node saved, and the node's engines with the version they serve.
func TestStatusOnceShowsRunningNode(t *testing.T) {
	srv, err := natsbus.Connect(t.Context(), natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	url := srv.ClientURL()

	cfgPath := writeFile(t, "run.yaml", "run:\n  data_dir: "+t.TempDir()+"\n  report_dir: "+t.TempDir()+"\n")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncbuf.Buffer
	exited := make(chan int, 1)
	go func() {
		exited <- executeContext(ctx, []string{"node", "--config", cfgPath, "--name", "solo", "--nats", url,
			"--gossip", "127.0.0.1:0", "--steps", "1000", "--log-level", "error"}, &out, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Error("node did not stop")
		}
	})

	var last string
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case code := <-exited:
			t.Fatalf("node exited with %d; stdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
		default:
		}
		code, got, errOut := cli(t, "status", "--nats", url, "--once", "--wait", "1500ms")
		if code != 0 {
			t.Fatalf("status: code %d, stderr %q", code, errOut)
		}
		last = got
		if ok := checkStatus(t, got, false); ok {
			t.Logf("asyncrl status --once:\n%s", got)
			checkLive(t, url)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed the holder, term, durable step and engines; last:\n%s\nnode stdout:\n%s", last, out.String())
		}
	}
}

// checkStatus reports whether out shows the running node completely; with
// report it fails the test on each part that is wrong.
func checkStatus(t *testing.T, out string, report bool) bool {
	t.Helper()
	bad := func(format string, args ...any) bool {
		if report {
			t.Errorf(format+"\n%s", append(args, out)...)
		}
		return false
	}
	if !strings.Contains(out, "\nmembers  1: solo\n") {
		return bad("members line does not list solo")
	}
	l := statusLeaseRE.FindStringSubmatch(out)
	if l == nil || l[1] != "solo" {
		return bad("lease line does not name solo")
	}
	tm := statusTermRE.FindStringSubmatch(out)
	if tm == nil || tm[4] != "solo" || tm[2] != l[2] || tm[3] != l[2] {
		return bad("term line does not name solo's term with the lease's token %s", l[2])
	}
	s := statusStepRE.FindStringSubmatch(out)
	if s == nil || s[3] != "solo" || s[4] != l[2] {
		return bad("step line has no durable step saved by solo with token %s", l[2])
	}
	if step, _ := strconv.Atoi(s[1]); step < 1 {
		return bad("durable step %d, want >= 1", step)
	}
	e := statusEngRE.FindAllStringSubmatch(out, -1)
	if len(e) == 0 {
		return bad("no engine of solo listed")
	}
	return true
}

// checkLive runs the live view (piped: one snapshot after another,
// separated by a blank line) until it has redrawn twice, then stops it
// as an interrupt would; it exits 0.
func checkLive(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- executeContext(ctx, []string{"status", "--nats", url, "--interval", "200ms"}, &out, &errb)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(out.String(), "asyncrl status: run local") < 2 {
		select {
		case code := <-done:
			t.Fatalf("live status exited with %d before two redraws: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("live status did not redraw twice in 30s:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("live status: code %d after cancel, stderr %q", code, errb.String())
	}
	if !strings.Contains(out.String(), "\n\nasyncrl status: run local") || !strings.Contains(out.String(), "lease    trainer lease held by solo") {
		t.Errorf("live output is not snapshots separated by a blank line naming the holder:\n%s", out.String())
	}
}
