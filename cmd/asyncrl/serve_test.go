package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/internal/syncbuf"
)

var listenRE = regexp.MustCompile(`asyncrl ([\w-]+): listening on (http://[0-9.:]+)`)

// startServer runs a long-lived subcommand in the background and returns the
// URL it announced, a stop func, and its exit code channel.
func startServer(t *testing.T, what string, args ...string) (url string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncbuf.Buffer
	codec := make(chan int, 1)
	go func() { codec <- executeContext(ctx, args, &out, &errb) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, m := range listenRE.FindAllStringSubmatch(errb.String(), -1) {
			if m[1] == what {
				url = m[2]
			}
		}
		if url != "" {
			break
		}
		select {
		case code := <-codec:
			cancel()
			t.Fatalf("%s exited early with %d: %s", what, code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("%s never announced its address; stderr: %s", what, errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return url, func() int {
		cancel()
		select {
		case code := <-codec:
			return code
		case <-time.After(15 * time.Second):
			t.Fatalf("%s did not stop after cancel", what)
			return -1
		}
	}
}

func complete(t *testing.T, url, session string) (*http.Response, map[string]any) {
	t.Helper()
	body := `{"model":"asyncrl-policy","prompt":"rev abc=","max_tokens":4,"temperature":1,"seed":7}`
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s/v1/completions: %d %s", url, resp.StatusCode, raw)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("bad JSON %q: %v", raw, err)
	}
	return resp, out
}

func TestEngineAndRouterCommandsServe(t *testing.T) {
	engineURL, stopEngine := startServer(t, "engine", "engine", "--listen", "127.0.0.1:0", "--seed", "3", "--log-level", "error")
	resp, out := complete(t, engineURL, "")
	if resp.Header.Get("X-Weight-Version") != "0" {
		t.Fatalf("engine X-Weight-Version = %q, want 0", resp.Header.Get("X-Weight-Version"))
	}
	choices, _ := out["choices"].([]any)
	if len(choices) != 1 {
		t.Fatalf("engine answered %v", out)
	}

	for _, front := range []string{"fast", "net_http"} { // --front: both HTTP front ends serve and stop cleanly
		routerURL, stopRouter := startServer(t, "router", "router", "--listen", "127.0.0.1:0", "--engine", engineURL,
			"--policy", "sticky_least_loaded", "--log-level", "error", "--front", front)
		for i := 0; i < 3; i++ {
			resp, out := complete(t, routerURL, "traj-1")
			if got := resp.Header.Get("X-Asyncrl-Replica"); got != engineURL {
				t.Fatalf("%s: X-Asyncrl-Replica = %q, want %q", front, got, engineURL)
			}
			if out["object"] != "text_completion" {
				t.Fatalf("%s: router passed through %v", front, out)
			}
		}
		if code := stopRouter(); code != 0 {
			t.Fatalf("%s: router exit code %d", front, code)
		}
	}
	if code := stopEngine(); code != 0 {
		t.Fatalf("engine exit code %d", code)
	}
}

func TestRouterCommandRejectsBadInput(t *testing.T) {
	if code, _, errOut := cli(t, "router", "--listen", "127.0.0.1:0"); code != 1 || !strings.Contains(errOut, "no engines") {
		t.Errorf("no engines: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := cli(t, "router", "--engine", "http://127.0.0.1:1", "--policy", "fastest"); code != 1 ||
		!strings.Contains(errOut, `router.policy: "fastest" is not one of`) {
		t.Errorf("bad policy: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := cli(t, "router", "--engine", "http://127.0.0.1:1", "--front", "nginx"); code != 1 ||
		!strings.Contains(errOut, `router.front: "nginx" is not one of`) {
		t.Errorf("bad front: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := cli(t, "router", "--engine", "http://127.0.0.1:1", "--listen", "0.0.0.0:0"); code != 1 ||
		!strings.Contains(strings.ToLower(errOut), "token") {
		t.Errorf("off-loopback without token: code %d, stderr %q", code, errOut)
	}
}

func TestEngineCommandRejectsMissingWeights(t *testing.T) {
	code, _, errOut := cli(t, "engine", "--listen", "127.0.0.1:0", "--weights", t.TempDir()+"/missing")
	if code != 1 || !strings.Contains(errOut, "load weights from") {
		t.Errorf("missing weights: code %d, stderr %q", code, errOut)
	}
}

func TestEnvServeAndList(t *testing.T) {
	code, out, _ := cli(t, "env", "list")
	if code != 0 || !strings.Contains(out, "guess") || !strings.Contains(out, "reverse") {
		t.Fatalf("env list: code %d, out %q", code, out)
	}
	url, stop := startServer(t, "env", "env", "serve", "--task", "arith", "--listen", "127.0.0.1:0")
	resp, err := http.Get(url + "/info")
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if info["name"] != "arith" {
		t.Fatalf("/info = %v, want name arith", info)
	}
	if code := stop(); code != 0 {
		t.Fatalf("env serve exit code %d", code)
	}
	if code, _, errOut := cli(t, "env", "serve", "--task", "nope"); code != 1 || !strings.Contains(errOut, "guess") {
		t.Fatalf("unknown task: code %d, stderr %q", code, errOut)
	}
}

func TestSimCommand(t *testing.T) {
	code, out, errOut := cli(t, "sim", "--seed", "1", "--steps", "3")
	if code != 0 || !strings.Contains(out+errOut, "1 of 1 passed") {
		t.Fatalf("sim: code %d, out %q, err %q", code, out, errOut)
	}
	code, out, errOut = cli(t, "sim", "--seeds", "50", "--steps", "8", "--bug", "router-ignores-version-gating")
	if code != 1 || !strings.Contains(out+errOut, "routing-gate") {
		t.Fatalf("sim with a planted bug: code %d, out %q, err %q", code, out, errOut)
	}
	if code, _, errOut := cli(t, "sim", "--scenario", "nope"); code != 1 || !strings.Contains(errOut, "partitions") {
		t.Fatalf("bad scenario: code %d, err %q", code, errOut)
	}
}
