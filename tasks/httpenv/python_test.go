package httpenv

import (
	"bufio"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/tasks"
)

// TestPythonServer: the client drives a server written in another language
// (testdata/echo_server.py, standard library only), which is the point of
// the protocol. Skipped where python3 is not installed.
func TestPythonServer(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	cmd := exec.Command(py, "testdata/echo_server.py")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok || !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("server said %q, %v", line, err)
	}
	c, err := Dial(context.Background(), base, DefaultClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.hc.CloseIdleConnections()
	if c.Name() != "echo" || c.MaxTurns() != 1 || c.MaxTokensPerTurn() != 8 {
		t.Fatalf("info: %+v", c.info)
	}
	for _, tc := range []struct {
		p      tasks.Prompt
		obs    string
		action string
		reward float64
	}{
		{tasks.Prompt{Text: "say bead"}, "say bead", "bead  ", 1},
		{tasks.Prompt{Text: "say bead"}, "say bead", "bed", 0},
		{tasks.Prompt{Seed: 2}, "say ace", " ace", 1},
	} {
		env := c.NewEnv()
		obs, err := env.Reset(tc.p)
		if err != nil || obs != tc.obs {
			t.Fatalf("Reset(%+v) = %q, %v", tc.p, obs, err)
		}
		if _, r, done, err := env.Step(tc.action); err != nil || !done || r != tc.reward {
			t.Errorf("Step(%q) = %v %v %v, want %v", tc.action, r, done, err, tc.reward)
		}
	}
	if _, err := c.NewEnv().Reset(tasks.Prompt{Text: "hello"}); !errors.Is(err, tasks.ErrBadPrompt) {
		t.Errorf("bad prompt: err = %v", err)
	}
	env := c.NewRemoteEnv()
	env.Reset(tasks.Prompt{Seed: 1})
	env.id = "feed"
	if _, _, _, err := env.Step("x"); !errors.Is(err, ErrUnknownEpisode) || !strings.Contains(err.Error(), "feed") {
		t.Errorf("bad episode id: err = %v", err)
	}
}
