package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mkcerts writes a CA, each node's pair and a route password, and prints
// the flags that use them; a node whose routes listen off loopback without
// them refuses to start naming the flags, and with them gets past that
// check (it then fails on a bad --gossip, checked next, not on security).
func TestSecurityMkcertsAndOffLoopbackNode(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := cli(t, "security", "mkcerts", "--dir", dir, "--nodes", "n1,n2", "--hosts", "10.0.0.1")
	if code != 0 {
		t.Fatalf("mkcerts: code %d, stderr %s", code, errOut)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem", "n1-cert.pem", "n1-key.pem", "n2-cert.pem", "n2-key.pem", "route-password"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(out, "--cluster-tls-cert "+filepath.Join(dir, "n1-cert.pem")) {
		t.Errorf("mkcerts output does not give the flags:\n%s", out)
	}
	pw, _ := os.ReadFile(filepath.Join(dir, "route-password"))
	if strings.Contains(out, strings.TrimSpace(string(pw))) {
		t.Error("mkcerts printed the route password")
	}

	base := []string{"node", "--name", "n1", "--roles", "engine", "--cluster-listen", "10.255.0.1:6222", "--routes", "nats-route://10.255.0.1:6222"}
	code, _, errOut = cli(t, base...)
	if code != 1 || !strings.Contains(errOut, "--cluster-tls-ca") || !strings.Contains(errOut, "--route-user") || !strings.Contains(errOut, "off loopback") {
		t.Errorf("bare off-loopback routes: code %d, stderr %q", code, errOut)
	}
	with := append(base, "--cluster-tls-ca", filepath.Join(dir, "ca.pem"), "--cluster-tls-cert", filepath.Join(dir, "n1-cert.pem"),
		"--cluster-tls-key", filepath.Join(dir, "n1-key.pem"), "--route-user", "asyncrl", "--route-password-file", filepath.Join(dir, "route-password"),
		"--gossip", "no-port")
	code, _, errOut = cli(t, with...)
	if strings.Contains(errOut, "off loopback") || !strings.Contains(errOut, "--gossip") {
		t.Errorf("secured routes still refused as insecure: code %d, stderr %q", code, errOut)
	}
	if strings.Contains(errOut, strings.TrimSpace(string(pw))) {
		t.Error("the node printed the route password")
	}
	code, _, errOut = cli(t, "node", "--name", "n1", "--nats-password-file", filepath.Join(dir, "missing"), "--nats-user", "u")
	if code != 1 || !strings.Contains(errOut, "bus.password_file") {
		t.Errorf("missing password file: code %d, stderr %q", code, errOut)
	}
	code, out, _ = cli(t, "security", "roles")
	if code != 0 || !strings.Contains(out, "engine (roles engine)") || !strings.Contains(out, "asyncrl.*.engines.*.ack") {
		t.Errorf("security roles: code %d:\n%s", code, out)
	}
}

// asyncrl engine off loopback without a key refuses to start, naming the
// flag; a key file that is missing is named too.
func TestEngineOffLoopbackNeedsKey(t *testing.T) {
	code, _, errOut := cli(t, "engine", "--listen", "0.0.0.0:0")
	if code != 1 || !strings.Contains(errOut, "--api-key-file") || !strings.Contains(errOut, "off loopback") {
		t.Errorf("no key: code %d, stderr %q", code, errOut)
	}
	code, _, errOut = cli(t, "engine", "--listen", "0.0.0.0:0", "--api-key-file", filepath.Join(t.TempDir(), "none"))
	if code != 1 || !strings.Contains(errOut, "--api-key-file") {
		t.Errorf("missing key file: code %d, stderr %q", code, errOut)
	}
}

// asyncrl node gossiping off loopback without a key refuses to start,
// naming --gossip-key-file; a bad key file is named with the lengths it
// should have.
func TestNodeGossipOffLoopbackNeedsKey(t *testing.T) {
	code, _, errOut := cli(t, "node", "--name", "n1", "--roles", "engine", "--gossip", "10.255.0.1:7946")
	if code != 1 || !strings.Contains(errOut, "--gossip-key-file") || !strings.Contains(errOut, "off loopback") {
		t.Errorf("no key: code %d, stderr %q", code, errOut)
	}
	bad := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(bad, []byte("c2hvcnQ=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = cli(t, "node", "--name", "n1", "--roles", "engine", "--gossip", "10.255.0.1:7946", "--gossip-key-file", bad)
	if code != 1 || !strings.Contains(errOut, bad) || !strings.Contains(errOut, "16, 24 or 32-byte") {
		t.Errorf("bad key file: code %d, stderr %q", code, errOut)
	}
}
