package config

import (
	"path/filepath"
	"testing"
)

// TestExamplesLoad: every file under examples/ is a valid configuration
// (strict keys, every rule of Validate), so a user copying one starts from
// something that runs.
func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 7 {
		t.Fatalf("found %d example configs (%v); want the built-in, MoE, SFT, torch and the real-model ones", len(files), files)
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
