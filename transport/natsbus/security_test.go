package natsbus_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/internal/certs"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/transport/natsbus/natstest"
)

// makeCerts makes a CA and certificates for names, at test time.
func makeCerts(t *testing.T, names ...string) certs.Files {
	t.Helper()
	f, err := certs.Make(certs.Options{Dir: t.TempDir(), Nodes: names})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func tlsFor(f certs.Files, name string) natsbus.TLSFiles {
	return natsbus.TLSFiles{CAFile: f.CA, CertFile: f.Cert[name], KeyFile: f.Key[name]}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool, show ...*syncbuf.Buffer) {
	t.Helper()
	dl := time.Now().Add(within)
	for !cond() {
		if time.Now().After(dl) {
			for _, l := range show {
				t.Log(l.String())
			}
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOffLoopbackRoutesNeedTLSAndAuth: an embedded server whose routes
// listen off loopback refuses to start without mutual TLS and route
// authentication, and says which fields are missing; so does a client
// listener off loopback without users and a certificate.
func TestOffLoopbackRoutesNeedTLSAndAuth(t *testing.T) {
	f := makeCerts(t, "n1")
	cases := []struct {
		name string
		mut  func(*natsbus.Options)
		want []string
	}{
		{"routes bare", func(o *natsbus.Options) {
			o.Cluster = &natsbus.ClusterOptions{Name: "c", Listen: "10.255.0.1:6222", Routes: []string{"nats-route://10.255.0.1:6222"}}
		}, []string{"Cluster.TLS.CAFile", "Cluster.TLS.CertFile", "Cluster.User"}},
		{"routes TLS, no auth", func(o *natsbus.Options) {
			o.Cluster = &natsbus.ClusterOptions{Name: "c", Listen: "0.0.0.0:6222", Routes: []string{"nats-route://10.255.0.1:6222"}, TLS: tlsFor(f, "n1")}
		}, []string{"Cluster.User, Cluster.Password"}},
		{"routes auth, no TLS", func(o *natsbus.Options) {
			o.Cluster = &natsbus.ClusterOptions{Name: "c", Listen: "10.255.0.1:6222", Routes: []string{"nats-route://10.255.0.1:6222"}, User: "r", Password: "secret-route-pw"}
		}, []string{"Cluster.TLS.CertFile"}},
		{"client listener", func(o *natsbus.Options) { o.Host = "0.0.0.0" }, []string{"Users", "TLS.CertFile"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := natsbus.DefaultOptions()
			c.mut(&o)
			err := o.Validate()
			if !errors.Is(err, natsbus.ErrInsecure) {
				t.Fatalf("Validate: %v, want ErrInsecure", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret-route-pw") {
				t.Errorf("error prints the route password: %v", err)
			}
		})
	}
	// Loopback stays zero-config.
	o := natsbus.DefaultOptions()
	o.Cluster = &natsbus.ClusterOptions{Name: "c", Listen: "127.0.0.1:0", Routes: []string{"nats-route://127.0.0.1:6222"}}
	if err := o.Validate(); err != nil {
		t.Fatalf("loopback cluster: %v", err)
	}
}

// secureMember is one member of a TLS + route-auth cluster on loopback.
func secureMember(t *testing.T, name string, port int, routes []string, tlsf natsbus.TLSFiles, user, pass string, log *syncbuf.Buffer) (*natsbus.Bus, error) {
	o := natsbus.DefaultOptions()
	o.Name, o.StoreDir = name, t.TempDir()
	o.Logger = zerolog.New(log).Level(zerolog.DebugLevel)
	o.Cluster = &natsbus.ClusterOptions{Name: "asyncrl", Listen: "127.0.0.1:" + strconv.Itoa(port), Routes: routes, TLS: tlsf, User: user, Password: pass}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := natsbus.Connect(ctx, o)
	if b != nil {
		t.Cleanup(func() { _ = b.Close() })
	}
	return b, err
}

var refusedRoute = regexp.MustCompile(`(?i)authentication error|authorization violation|handshake error`)

// TestSecureRoutesRefuseUnauthenticatedPeer: two members with mutual TLS
// and route authentication form a cluster; a peer with the right
// certificate but the wrong route password, and a peer without TLS, are
// refused by them (their logs say so) and never count as routes.
func TestSecureRoutesRefuseUnauthenticatedPeer(t *testing.T) {
	f := makeCerts(t, "a", "b", "c")
	ports := []int{natstest.FreePort(t), natstest.FreePort(t)}
	routes := []string{"nats-route://127.0.0.1:" + strconv.Itoa(ports[0]), "nats-route://127.0.0.1:" + strconv.Itoa(ports[1])}
	logs := []*syncbuf.Buffer{{}, {}}
	type res struct {
		i   int
		b   *natsbus.Bus
		err error
	}
	out := make(chan res, 2)
	for i, n := range []string{"a", "b"} {
		go func() {
			b, err := secureMember(t, n, ports[i], routes, tlsFor(f, n), "route", "route-pw-1", logs[i])
			out <- res{i, b, err}
		}()
	}
	good := make([]*natsbus.Bus, 2)
	for range 2 {
		r := <-out
		if r.err != nil {
			t.Fatalf("member %d: %v", r.i, r.err)
		}
		good[r.i] = r.b
	}
	waitFor(t, 20*time.Second, "the two members to route to each other", func() bool {
		return fmt.Sprint(good[0].RoutePeers()) == "[b]" && fmt.Sprint(good[1].RoutePeers()) == "[a]"
	}, logs[0])
	for _, bad := range []struct {
		name string
		tls  natsbus.TLSFiles
		pass string
	}{{"wrong password", tlsFor(f, "c"), "guess"}, {"no TLS, no password", natsbus.TLSFiles{}, ""}} {
		t.Run(bad.name, func(t *testing.T) {
			n0, n1 := len(logs[0].String()), len(logs[1].String())
			var blog syncbuf.Buffer
			user := "route"
			if bad.pass == "" {
				user = ""
			}
			b, err := secureMember(t, "c-"+strings.ReplaceAll(bad.name, " ", "-"), natstest.FreePort(t), routes, bad.tls, user, bad.pass, &blog)
			if err != nil {
				t.Fatalf("the bad peer's own server: %v", err)
			}
			waitFor(t, 20*time.Second, "a member to log the refused route", func() bool {
				return refusedRoute.MatchString(logs[0].String()[n0:]) || refusedRoute.MatchString(logs[1].String()[n1:])
			})
			// The peer dials both members: a route to the member that has
			// not refused it yet is still in its handshake (counted by its
			// server) when the other one's refusal is logged.
			waitFor(t, 20*time.Second, "the unauthenticated peer to hold no route", func() bool { return b.Routes() == 0 })
			if got := fmt.Sprint(good[0].RoutePeers(), good[1].RoutePeers()); got != "[b] [a]" {
				t.Errorf("members' route peers %s, want [b] [a] (the peer joined)", got)
			}
			_ = b.Close()
		})
	}
	for i, l := range logs {
		if strings.Contains(l.String(), "route-pw-1") {
			t.Errorf("member %d logged the route password", i)
		}
	}
}

// TestWrongCredentialsFailClearly: a client with a wrong password gets
// ErrAuth naming the user and the kind of credential, never the secret;
// the right one connects.
func TestWrongCredentialsFailClearly(t *testing.T) {
	srv := embedded(t, func(o *natsbus.Options) {
		o.Users = []natsbus.User{{Name: "engine-n2", Password: "right-pw"}}
		o.Auth = natsbus.Auth{User: "engine-n2", Password: "right-pw"}
	})
	defer srv.Close()
	for _, a := range []natsbus.Auth{{User: "engine-n2", Password: "wrong-pw-xyz"}, {Token: "tok-xyz"}, {}} {
		o := natsbus.DefaultOptions()
		o.URL, o.Auth, o.MaxReconnects = srv.ClientURL(), a, 1
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		b, err := natsbus.Connect(ctx, o)
		cancel()
		if err == nil {
			_ = b.Close()
			t.Fatalf("%v: connected", a)
		}
		if !errors.Is(err, natsbus.ErrAuth) {
			t.Errorf("%v: %v, want ErrAuth", a, err)
		}
		if strings.Contains(err.Error(), "wrong-pw-xyz") || strings.Contains(err.Error(), "tok-xyz") {
			t.Errorf("error prints the secret: %v", err)
		}
		if a.User != "" && !strings.Contains(err.Error(), `user "engine-n2"`) {
			t.Errorf("error does not say which user: %v", err)
		}
	}
	if s := fmt.Sprintf("%v %+v %#v", natsbus.Auth{User: "u", Password: "pw-123"}, natsbus.Auth{Token: "tk-123"}, natsbus.Auth{Password: "pw-123"}); strings.Contains(s, "123") {
		t.Errorf("Auth formats its secret: %s", s)
	}
	o := natsbus.DefaultOptions()
	o.URL, o.Auth = srv.ClientURL(), natsbus.Auth{User: "engine-n2", Password: "right-pw"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := natsbus.Connect(ctx, o)
	if err != nil {
		t.Fatalf("right credentials: %v", err)
	}
	_ = b.Close()
}

// TestClientTLS: an embedded server with client TLS and users; a client
// that trusts its CA connects, one that does not is refused with ErrAuth.
func TestClientTLS(t *testing.T) {
	f := makeCerts(t, "s")
	other := makeCerts(t, "x")
	srv := embedded(t, func(o *natsbus.Options) {
		o.TLS = tlsFor(f, "s")
		o.Users = []natsbus.User{{Name: "u", Password: "p"}}
		o.Auth = natsbus.Auth{User: "u", Password: "p"}
	})
	defer srv.Close()
	for _, c := range []struct {
		ca string
		ok bool
	}{{f.CA, true}, {other.CA, false}} {
		o := natsbus.DefaultOptions()
		o.URL, o.Auth, o.TLS, o.MaxReconnects = srv.ClientURL(), natsbus.Auth{User: "u", Password: "p"}, natsbus.TLSFiles{CAFile: c.ca}, 1
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		b, err := natsbus.Connect(ctx, o)
		cancel()
		switch {
		case c.ok && err != nil:
			t.Errorf("trusted CA: %v", err)
		case !c.ok && err == nil:
			t.Errorf("untrusted CA connected")
		case !c.ok && !errors.Is(err, natsbus.ErrAuth):
			t.Errorf("untrusted CA: %v, want ErrAuth", err)
		}
		if b != nil {
			_ = b.Close()
		}
	}
}
