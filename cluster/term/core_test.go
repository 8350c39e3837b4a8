package term

import (
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/termwatch"
)

// The core's stories are scenario files (scenario_test.go, testdata/);
// this file keeps the clock and config they and the property test share.

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func testConfig() Config {
	return Config{Node: "n1", Run: "run", Steps: 10, Checkpoints: true,
		Watch: termwatch.Config{StallAfter: time.Minute, UnhealthyAfter: 20 * time.Second}}
}

// PromptTokenOf reads back the token PromptID qualified an id with.
func TestPromptTokenOf(t *testing.T) {
	if tok, ok := PromptTokenOf(PromptID(42, "gsm8k/7")); !ok || tok != 42 {
		t.Errorf("PromptTokenOf(PromptID(42, gsm8k/7)) = %d %v", tok, ok)
	}
	for _, id := range []string{"gsm8k/7", "t/7", "tx/7", "t42", "", "t-1/7"} {
		if tok, ok := PromptTokenOf(id); ok {
			t.Errorf("PromptTokenOf(%q) = %d, want not a qualified id", id, tok)
		}
	}
}
