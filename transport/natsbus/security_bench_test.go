package natsbus_test

import (
	"context"
	"testing"

	"github.com/asyncrl/asyncrl/cluster/access"
	"github.com/asyncrl/asyncrl/internal/certs"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// BenchmarkSecurePublishDeliver is BenchmarkPublishDeliver side by side
// with the security layer on: plain; a user with the engine role's
// permissions (the server checks every publish against them); client TLS
// plus that user. 256-byte messages, publish → handler through the
// embedded server.
func BenchmarkSecurePublishDeliver(b *testing.B) {
	f, err := certs.Make(certs.Options{Dir: b.TempDir(), Nodes: []string{"s"}})
	if err != nil {
		b.Fatal(err)
	}
	perms := access.Permissions([]string{"engine"})
	user := func(o *natsbus.Options) {
		o.Users = []natsbus.User{{Name: "engine-n2", Password: "pw", Permissions: &perms}}
		o.Auth = natsbus.Auth{User: "engine-n2", Password: "pw"}
	}
	for _, c := range []struct {
		name string
		mut  func(*natsbus.Options)
	}{
		{"plain", func(*natsbus.Options) {}},
		{"role-user", user},
		{"tls+role-user", func(o *natsbus.Options) {
			user(o)
			o.TLS = natsbus.TLSFiles{CAFile: f.CA, CertFile: f.Cert["s"], KeyFile: f.Key["s"]}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			o := natsbus.DefaultOptions()
			o.StoreDir = b.TempDir()
			c.mut(&o)
			bus, err := natsbus.Connect(context.Background(), o)
			if err != nil {
				b.Fatal(err)
			}
			defer bus.Close()
			subj := transport.MustSubject("b", transport.TopicEngines, "e0", "ack") // allowed for the engine role
			benchPublishDeliver(b, bus, subj)
		})
	}
}
