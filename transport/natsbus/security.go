package natsbus

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/asyncrl/asyncrl/internal/netx"
)

// Sentinel errors of the security layer.
var (
	// ErrInsecure: an embedded server would listen off loopback without
	// the TLS and authentication that listener needs. The message names
	// the missing fields.
	ErrInsecure = errors.New("natsbus: refusing to listen off loopback without TLS and authentication")
	// ErrAuth: the server refused this client's credentials (or TLS
	// certificate). The message says which kind of credential was sent,
	// never the secret.
	ErrAuth = errors.New("natsbus: the NATS server refused this client's credentials")
)

// Auth is how the client proves who it is to the NATS server. Use at most
// one of CredsFile, NKeySeedFile, User (with Password) and Token. Secrets
// are never printed: String names the kind only, and no error of this
// package quotes them.
type Auth struct {
	// CredsFile is a decentralised-auth credentials file (JWT + nkey seed,
	// as `nsc generate creds` writes).
	CredsFile string
	// NKeySeedFile holds a user nkey seed ("SU…").
	NKeySeedFile string
	// User and Password: plain user authentication.
	User, Password string
	// Token: token authentication.
	Token string
}

// String says which credential is set, without any secret.
func (a Auth) String() string {
	switch {
	case a.CredsFile != "":
		return "credentials file " + a.CredsFile
	case a.NKeySeedFile != "":
		return "nkey seed file " + a.NKeySeedFile
	case a.User != "":
		return fmt.Sprintf("user %q with a password", a.User)
	case a.Token != "":
		return "a token"
	}
	return "no credentials"
}

// GoString keeps %#v from printing the secrets too.
func (a Auth) GoString() string { return "natsbus.Auth{" + a.String() + "}" }

func (a Auth) validate() error {
	n := 0
	for _, set := range []bool{a.CredsFile != "", a.NKeySeedFile != "", a.User != "" || a.Password != "", a.Token != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("natsbus: Auth: set one of CredsFile, NKeySeedFile, User+Password and Token, not several (%s)", a)
	}
	if a.Password != "" && a.User == "" {
		return fmt.Errorf("natsbus: Auth: a password without a user")
	}
	for _, f := range []struct{ field, path string }{{"CredsFile", a.CredsFile}, {"NKeySeedFile", a.NKeySeedFile}} {
		if err := readable(f.path); err != nil {
			return fmt.Errorf("natsbus: Auth.%s: %w", f.field, err)
		}
	}
	return nil
}

func (a Auth) natsOptions() []nats.Option {
	switch {
	case a.CredsFile != "":
		return []nats.Option{nats.UserCredentials(a.CredsFile)}
	case a.NKeySeedFile != "":
		opt, err := nats.NkeyOptionFromSeed(a.NKeySeedFile)
		if err != nil {
			// validate read the file; a bad seed surfaces at connect.
			return []nats.Option{func(*nats.Options) error { return fmt.Errorf("nkey seed file %s: %w", a.NKeySeedFile, err) }}
		}
		return []nats.Option{opt}
	case a.User != "":
		return []nats.Option{nats.UserInfo(a.User, a.Password)}
	case a.Token != "":
		return []nats.Option{nats.Token(a.Token)}
	}
	return nil
}

// TLSFiles are PEM files for one side of a TLS connection.
type TLSFiles struct {
	// CAFile verifies the peer's certificate.
	CAFile string
	// CertFile and KeyFile are this side's certificate and key.
	CertFile, KeyFile string
}

// Set reports whether any file is given.
func (t TLSFiles) Set() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// complete: CA, certificate and key all given and readable; field names
// the struct field in errors.
func (t TLSFiles) complete(field string) error {
	var miss []string
	for _, f := range []struct{ name, path string }{{"CAFile", t.CAFile}, {"CertFile", t.CertFile}, {"KeyFile", t.KeyFile}} {
		if f.path == "" {
			miss = append(miss, field+"."+f.name)
		}
	}
	if len(miss) > 0 {
		return fmt.Errorf("missing %s", strings.Join(miss, ", "))
	}
	return t.readable(field)
}

func (t TLSFiles) readable(field string) error {
	if (t.CertFile == "") != (t.KeyFile == "") {
		return fmt.Errorf("natsbus: %s: CertFile and KeyFile go together", field)
	}
	for _, f := range []struct{ name, path string }{{"CAFile", t.CAFile}, {"CertFile", t.CertFile}, {"KeyFile", t.KeyFile}} {
		if err := readable(f.path); err != nil {
			return fmt.Errorf("natsbus: %s.%s: %w", field, f.name, err)
		}
	}
	return nil
}

// serverTLS builds a server-side config; verify asks for and checks the
// peer's certificate against CAFile (mutual TLS).
func (t TLSFiles) serverTLS(verify bool) (*tls.Config, error) {
	return server.GenTLSConfig(&server.TLSConfigOpts{CertFile: t.CertFile, KeyFile: t.KeyFile, CaFile: t.CAFile, Verify: verify})
}

func (t TLSFiles) natsOptions() []nats.Option {
	var o []nats.Option
	if t.CAFile != "" {
		o = append(o, nats.RootCAs(t.CAFile))
	}
	if t.CertFile != "" {
		o = append(o, nats.ClientCert(t.CertFile, t.KeyFile))
	}
	return o
}

func readable(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return f.Close()
}

// User is one user of the embedded server: its password and what it may
// publish and subscribe to (nil Permissions: everything).
type User struct {
	Name, Password string
	Permissions    *Permissions
}

// Permissions are a user's subject permissions, as nats-server's
// authorization block has them. A publish or subscription outside them is
// refused by the server ("Permissions Violation").
type Permissions struct {
	Publish, Subscribe Rule
	// AllowResponses lets the user publish one reply to any request it
	// received (nats-server allow_responses), without listing _INBOX.>.
	AllowResponses bool
}

// Rule allows and denies subject patterns; deny wins.
type Rule struct {
	Allow, Deny []string
}

func (p *Permissions) server() *server.Permissions {
	if p == nil {
		return nil
	}
	sp := func(r Rule) *server.SubjectPermission {
		if len(r.Allow) == 0 && len(r.Deny) == 0 {
			return nil
		}
		return &server.SubjectPermission{Allow: r.Allow, Deny: r.Deny}
	}
	out := &server.Permissions{Publish: sp(p.Publish), Subscribe: sp(p.Subscribe)}
	if p.AllowResponses {
		out.Response = &server.ResponsePermission{MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS, Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION}
	}
	return out
}

// validateSecurity refuses an embedded server whose listeners are off
// loopback without TLS and authentication, and checks the files named.
func (o Options) validateSecurity() error {
	if err := o.Auth.validate(); err != nil {
		return err
	}
	if err := o.TLS.readable("TLS"); err != nil {
		return err
	}
	if o.URL != "" {
		return nil
	}
	if !netx.IsLoopback(o.Host) {
		var miss []string
		if len(o.Users) == 0 {
			miss = append(miss, "Users")
		}
		if o.TLS.CertFile == "" {
			miss = append(miss, "TLS.CertFile, TLS.KeyFile")
		}
		if len(miss) > 0 {
			return fmt.Errorf("%w: the client listener %s needs %s", ErrInsecure, o.Host, strings.Join(miss, ", "))
		}
	}
	if c := o.Cluster; c != nil {
		if err := c.TLS.readable("Cluster.TLS"); err != nil {
			return err
		}
		if (c.User == "") != (c.Password == "") {
			return fmt.Errorf("natsbus: Cluster.User and Cluster.Password go together (route authentication)")
		}
		host, _, _ := splitHostPort(c.Listen)
		if !netx.IsLoopback(host) {
			var miss []string
			if err := c.TLS.complete("Cluster.TLS"); err != nil {
				miss = append(miss, err.Error())
			}
			if c.User == "" {
				miss = append(miss, "missing Cluster.User, Cluster.Password")
			}
			if len(miss) > 0 {
				return fmt.Errorf("%w: routes on %s need mutual TLS and route authentication: %s", ErrInsecure, c.Listen, strings.Join(miss, "; "))
			}
		}
	}
	return nil
}

// applyServerSecurity sets the embedded server's users, client TLS, route
// TLS and route authentication.
func (o Options) applyServerSecurity(s *server.Options) error {
	for _, u := range o.Users {
		s.Users = append(s.Users, &server.User{Username: u.Name, Password: u.Password, Permissions: u.Permissions.server()})
	}
	if o.TLS.CertFile != "" {
		tc, err := o.TLS.serverTLS(false)
		if err != nil {
			return fmt.Errorf("natsbus: TLS: %w", err)
		}
		s.TLSConfig, s.TLS, s.TLSTimeout = tc, true, 5
	}
	c := o.Cluster
	if c == nil {
		return nil
	}
	if c.TLS.CertFile != "" {
		tc, err := c.TLS.serverTLS(c.TLS.CAFile != "")
		if err != nil {
			return fmt.Errorf("natsbus: Cluster.TLS: %w", err)
		}
		// A member both dials and accepts routes: it verifies the peer it
		// dials with the same CA (nats-server's config parser mirrors the
		// pools for cluster blocks the same way).
		tc.RootCAs = tc.ClientCAs
		s.Cluster.TLSConfig, s.Cluster.TLSTimeout = tc, 5
	}
	if c.User != "" {
		s.Cluster.Username, s.Cluster.Password, s.Cluster.AuthTimeout = c.User, c.Password, 5
		// nats-server sends a route's credentials from its URL only.
		for _, r := range s.Routes {
			if r.User == nil {
				r.User = url.UserPassword(c.User, c.Password)
			}
		}
	}
	return nil
}

// clientOptions are the nats.go options for this client's credentials and
// TLS. Connecting to its own embedded server with client TLS on, the CA is
// the server's (TLS.CAFile) too.
func (o Options) clientOptions() []nats.Option {
	return append(o.Auth.natsOptions(), o.TLS.natsOptions()...)
}

// authError turns nats.go's refusals into ErrAuth with what was sent.
func authError(err error, a Auth) error {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) ||
		strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		return fmt.Errorf("%w (sent %s): %w", ErrAuth, a, err)
	}
	var herr tls.RecordHeaderError
	var cerr *tls.CertificateVerificationError
	if errors.As(err, &herr) || errors.As(err, &cerr) || strings.Contains(err.Error(), "tls:") || strings.Contains(err.Error(), "x509:") {
		return fmt.Errorf("%w (TLS: check the CA and certificate files): %w", ErrAuth, err)
	}
	return err
}
