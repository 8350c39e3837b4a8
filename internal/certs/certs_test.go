package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"testing"
	"time"
)

// TestMakeVerifies: every node certificate verifies against the CA for
// both server and client use and names the hosts given; keys are 0600.
func TestMakeVerifies(t *testing.T) {
	f, err := Make(Options{Dir: t.TempDir(), Nodes: []string{"n1", "n2"}, Hosts: []string{"10.1.2.3", "gpu-7"}})
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA does not parse")
	}
	for _, n := range []string{"n1", "n2"} {
		pair, err := tls.LoadX509KeyPair(f.Cert[n], f.Key[n])
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, host := range []string{"10.1.2.3", "gpu-7", "127.0.0.1", "localhost", n} {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("%s for %s: %v", n, host, err)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other-host"}); err == nil {
			t.Errorf("%s verifies for a host it was not made for", n)
		}
		st, err := os.Stat(f.Key[n])
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s key mode %v, want 0600", n, st.Mode().Perm())
		}
	}
	// Another CA's certificates do not verify against this one.
	g, err := Make(Options{Dir: t.TempDir(), Nodes: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	pair, _ := tls.LoadX509KeyPair(g.Cert["x"], g.Key["x"])
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "localhost"}); err == nil {
		t.Error("a foreign CA's certificate verified")
	}
}

func TestMakeRefusesBadInput(t *testing.T) {
	for _, o := range []Options{{Nodes: []string{"a"}}, {Dir: t.TempDir()}, {Dir: t.TempDir(), Nodes: []string{"../a"}}, {Dir: t.TempDir(), Nodes: []string{"ca"}}} {
		if _, err := Make(o); !errors.Is(err, ErrInput) {
			t.Errorf("%+v: got %v, want ErrInput", o, err)
		}
	}
	// Expired certificates are what Now+Valid say.
	f, err := Make(Options{Dir: t.TempDir(), Nodes: []string{"a"}, Now: time.Now().Add(-48 * time.Hour), Valid: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pair, _ := tls.LoadX509KeyPair(f.Cert["a"], f.Key["a"])
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	if !leaf.NotAfter.Before(time.Now()) {
		t.Errorf("NotAfter %v, want in the past", leaf.NotAfter)
	}
}
