package main

import (
	"strings"
	"testing"
)

// TestTinkerServeRefusesBadInput: a non-loopback listen without an API key
// and a config with a bad tinker field fail with messages that say why.
func TestTinkerServeRefusesBadInput(t *testing.T) {
	t.Setenv("ASYNCRL_TINKER_API_KEY", "")
	code, _, errOut := cli(t, "tinker", "serve", "--listen", "0.0.0.0:0")
	if code == 0 || !strings.Contains(errOut, "needs an API key") {
		t.Fatalf("non-loopback without a key: exit %d, stderr %q", code, errOut)
	}
	cfg := writeFile(t, "bad.yaml", "tinker:\n  long_poll: 60s\n")
	code, _, errOut = cli(t, "tinker", "serve", "--config", cfg)
	if code == 0 || !strings.Contains(errOut, "tinker.long_poll") {
		t.Fatalf("long_poll over the SDK's timeout: exit %d, stderr %q", code, errOut)
	}
	cfg = writeFile(t, "unknown.yaml", "tinker:\n  listne: 127.0.0.1:1\n")
	code, _, errOut = cli(t, "tinker", "serve", "--config", cfg)
	if code == 0 || !strings.Contains(errOut, "listne") {
		t.Fatalf("unknown key: exit %d, stderr %q", code, errOut)
	}
}
