package node

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunWithEngineAPIKey: with engines.api_key_file and weight roots
// covering the run's data directory, the built-in engines refuse a request
// without the key while the run's own router and drivers (which send it)
// train and sync weights to the end.
func TestRunWithEngineAPIKey(t *testing.T) {
	cfg := smallConfig(t, 3)
	key := filepath.Join(t.TempDir(), "engine-key")
	if err := os.WriteFile(key, []byte("run-key-42\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Engines.APIKeyFile = key
	cfg.Engines.WeightRoots = []string{cfg.Run.DataDir, os.TempDir()}
	var refused []int
	n, s := runNode(t, cfg, func(n *Node) {
		for _, u := range n.EngineURLs() {
			resp, err := http.Post(u+"/pause", "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Errorf("%s: %v", u, err)
				continue
			}
			resp.Body.Close()
			refused = append(refused, resp.StatusCode)
		}
		deadline := time.Now().Add(30 * time.Second)
		for len(n.steps()) < 1 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	})
	for _, c := range refused {
		if c != http.StatusUnauthorized {
			t.Errorf("an engine answered %d to a keyless /pause, want 401", c)
		}
	}
	if len(refused) == 0 {
		t.Error("no engine to try")
	}
	if s.Steps != 3 || s.FinalVersion != 3 {
		t.Errorf("steps %d, final version %d; want 3 and 3 (the router and drivers send the key)", s.Steps, s.FinalVersion)
	}
	_ = n
}
