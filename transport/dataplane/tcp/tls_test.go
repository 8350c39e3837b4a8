package tcp

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/internal/certs"
	"github.com/asyncrl/asyncrl/transport/dataplane"
)

// clusterTLS makes a CA and node certificates as `asyncrl security
// mkcerts` does and returns node's server and client configs.
func clusterTLS(t *testing.T, dir, node string) (server, client *tls.Config) {
	t.Helper()
	f, err := certs.Make(certs.Options{Dir: dir, Nodes: []string{"n1", "n2"}})
	if err != nil {
		t.Fatal(err)
	}
	server, client, err = MutualTLS(f.CA, f.Cert[node], f.Key[node])
	if err != nil {
		t.Fatal(err)
	}
	return server, client
}

// With the cluster's certificates on both ends, the bytes flow over
// mutual TLS, checksum-exact, and through a listener off loopback
// (0.0.0.0) that the config would refuse without them.
func TestMutualTLSTransfer(t *testing.T) {
	dir := t.TempDir()
	srvTLS, _ := clusterTLS(t, dir, "n1")
	_, cliTLS, err := MutualTLS(dir+"/ca.pem", dir+"/n2-cert.pem", dir+"/n2-key.pem")
	if err != nil {
		t.Fatal(err)
	}
	src := randomBytes(3, 9<<20)
	p := plan(t, "w-tls", src, 1<<20, dataplane.XXH3)
	server := newBackend(t, func(c *Config) { c.Addr, c.Advertise, c.ServerTLS = "0.0.0.0:0", "127.0.0.1", srvTLS })
	publish(t, server, p, src)
	client := newBackend(t, func(c *Config) { c.ClientTLS = cliTLS })
	dst := make(dataplane.Buffer, len(src))
	res, err := client.Fetch(context.Background(), p, dst)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != int64(len(src)) || !bytes.Equal(dst, src) {
		t.Fatalf("result %+v: received bytes differ from the source", res)
	}
}

// A client without the cluster's certificate gets nothing: one with no
// client certificate, one with a certificate of another CA, and one that
// speaks plain TCP are all refused; the TLS refusals fail at once with
// ErrAuth instead of redialling (the backoff here outlasts the test).
func TestTLSRefusesClientsWithoutClusterCert(t *testing.T) {
	dir := t.TempDir()
	srvTLS, good := clusterTLS(t, dir, "n1")
	_, foreign := clusterTLS(t, t.TempDir(), "n2") // another CA
	src := randomBytes(4, 2<<20)
	p := plan(t, "w-refuse", src, 1<<20, dataplane.XXH3)
	server := newBackend(t, func(c *Config) { c.ServerTLS = srvTLS })
	publish(t, server, p, src)

	noCert := good.Clone()
	noCert.Certificates = nil
	// The foreign client trusts our CA (it verifies the server), but its
	// own certificate is signed by another: the server refuses it.
	foreignCert := good.Clone()
	foreignCert.Certificates = foreign.Certificates
	for name, ct := range map[string]*tls.Config{"no client certificate": noCert, "certificate of another CA": foreignCert,
		"server of another CA": foreign} {
		t.Run(name, func(t *testing.T) {
			client := newBackend(t, func(c *Config) { c.ClientTLS, c.Backoff, c.Streams = ct, time.Hour, 1 })
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			dst := make(dataplane.Buffer, len(src))
			res, err := client.Fetch(ctx, p, dst)
			if !errors.Is(err, ErrAuth) {
				t.Fatalf("Fetch = %v, want ErrAuth", err)
			}
			if res.Bytes != 0 || bytes.Contains(dst, src[:64]) {
				t.Fatalf("a refused client received %d bytes", res.Bytes)
			}
		})
	}
	t.Run("plain TCP", func(t *testing.T) {
		client := newBackend(t, func(c *Config) { c.MaxReconnects, c.Backoff = 1, time.Millisecond })
		dst := make(dataplane.Buffer, len(src))
		res, err := client.Fetch(context.Background(), p, dst)
		if !errors.Is(err, dataplane.ErrIncomplete) || res.Bytes != 0 {
			t.Fatalf("Fetch = %+v, %v; want nothing received and ErrIncomplete", res, err)
		}
	})
	// The server still serves the cluster's clients after the refusals.
	client := newBackend(t, func(c *Config) { c.ClientTLS = good })
	dst := make(dataplane.Buffer, len(src))
	if _, err := client.Fetch(context.Background(), p, dst); err != nil || !bytes.Equal(dst, src) {
		t.Fatalf("cluster client after the refusals: %v", err)
	}
}

// Off loopback the server needs mutual TLS: no ServerTLS, and a ServerTLS
// that does not verify client certificates, are refused with an error
// naming the fix.
func TestOffLoopbackNeedsMutualTLS(t *testing.T) {
	srvTLS, _ := clusterTLS(t, t.TempDir(), "n1")
	oneWay := srvTLS.Clone()
	oneWay.ClientAuth = tls.NoClientCert
	for _, c := range []struct {
		name, addr string
		tls        *tls.Config
		want       string
	}{
		{"no TLS, wildcard", "0.0.0.0:0", nil, "ServerTLS"},
		{"no TLS, address", "10.1.2.3:7000", nil, "--cluster-tls-"},
		{"no TLS, every interface", ":0", nil, "off loopback"},
		{"server-only TLS", "10.1.2.3:7000", oneWay, "RequireAndVerifyClientCert"},
	} {
		cfg := DefaultConfig()
		cfg.Addr, cfg.ServerTLS = c.addr, c.tls
		_, err := New(cfg)
		if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New = %v, want ErrInsecure naming %q", c.name, err, c.want)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		cfg := DefaultConfig()
		cfg.Addr = addr
		if _, err := New(cfg); err != nil {
			t.Errorf("%s without TLS: %v, want accepted (loopback)", addr, err)
		}
	}
	if _, _, err := MutualTLS("", "c", "k"); err == nil || !strings.Contains(err.Error(), "--cluster-tls-ca") {
		t.Errorf("MutualTLS without a CA: %v", err)
	}
}
