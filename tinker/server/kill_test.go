package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/client"
	"github.com/asyncrl/asyncrl/tinker/server"
)

// When ASYNCRL_TINKER_CHILD names a directory, this test binary is a
// server process for TestKilledServer: it serves until killed.
func init() {
	dir := os.Getenv("ASYNCRL_TINKER_CHILD")
	if dir == "" {
		return
	}
	r, err := server.Start(context.Background(), testConfig(dir), server.Options{Log: zerolog.Nop()})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("URL", r.URL)
	select {}
}

// TestKilledServer: a server process killed with SIGKILL while training
// futures are queued; a new server on the same data dir answers every one
// (done with its result, or failed naming the restart), none unknown.
func TestKilledServer(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "ASYNCRL_TINKER_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "URL ") {
		t.Fatalf("child server: %q %v", line, err)
	}
	c := &client.Client{BaseURL: strings.TrimSpace(strings.TrimPrefix(line, "URL "))}
	ctx := ctxT(t)
	_, ids := queueForwardBackward(t, ctx, c, 30)
	if err := c.Wait(ctx, ids[0], nil); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	_, c2 := start(t, testConfig(dir), "")
	var done, failed int
	for _, id := range ids {
		var res tinker.ForwardBackwardOutput
		err := c2.Wait(ctx, id, &res)
		var fe *client.FutureError
		switch {
		case err == nil && len(res.LossFnOutputs) == queuedData:
			done++
		case errors.As(err, &fe) && strings.Contains(fe.RequestFailedResponse.Error, "restarted"):
			failed++
		default:
			t.Fatalf("%s after the kill: %v (result %d outputs)", id, err, len(res.LossFnOutputs))
		}
	}
	t.Logf("after SIGKILL and restart: %d done, %d failed naming the restart", done, failed)
	if done == 0 || failed == 0 {
		t.Fatalf("want finished and interrupted futures, got %d done, %d failed", done, failed)
	}
}
