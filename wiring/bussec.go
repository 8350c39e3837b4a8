package wiring

import (
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// BusSecurity is the bus section's credentials and TLS, secrets read from
// their files. It never prints a secret (%v shows what is set).
type BusSecurity struct {
	// Auth and TLS of this node's client connection (TLS also the embedded
	// server's client listener).
	Auth natsbus.Auth
	TLS  natsbus.TLSFiles
	// RouteTLS, RouteUser and RoutePassword secure a clustered embedded
	// server's routes.
	RouteTLS                 natsbus.TLSFiles
	RouteUser, RoutePassword string
	// RolePermissions: the embedded server admits only this node's role
	// user (cluster/access).
	RolePermissions bool
}

// String says what is set, never a secret.
func (s BusSecurity) String() string {
	route := "no route auth"
	if s.RouteUser != "" {
		route = fmt.Sprintf("route user %q with a password", s.RouteUser)
	}
	return fmt.Sprintf("client %s, client TLS %v, route TLS %v, %s, role permissions %v",
		s.Auth, s.TLS.Set(), s.RouteTLS.Set(), route, s.RolePermissions)
}

// GoString keeps %#v from printing secrets.
func (s BusSecurity) GoString() string { return "wiring.BusSecurity{" + s.String() + "}" }

// BusSecurityFrom reads the bus section's secret files (password_file,
// token_file, route_password_file). Errors name the config key and the
// file, never its contents.
func BusSecurityFrom(c config.BusConfig) (BusSecurity, error) {
	s := BusSecurity{
		Auth:            natsbus.Auth{CredsFile: c.CredsFile, NKeySeedFile: c.NKeySeedFile, User: c.User},
		TLS:             natsbus.TLSFiles{CAFile: c.TLSCA, CertFile: c.TLSCert, KeyFile: c.TLSKey},
		RouteTLS:        natsbus.TLSFiles{CAFile: c.ClusterTLSCA, CertFile: c.ClusterTLSCert, KeyFile: c.ClusterTLSKey},
		RouteUser:       c.RouteUser,
		RolePermissions: c.RolePermissions,
	}
	var err error
	if s.Auth.Password, err = ReadSecret("bus.password_file", c.PasswordFile); err != nil {
		return s, err
	}
	if s.Auth.Token, err = ReadSecret("bus.token_file", c.TokenFile); err != nil {
		return s, err
	}
	if s.RoutePassword, err = ReadSecret("bus.route_password_file", c.RoutePasswordFile); err != nil {
		return s, err
	}
	return s, nil
}

// ReadSecret reads a secret from path (surrounding whitespace trimmed);
// "" for an empty path. An empty file is an error: an empty secret would
// silently mean "no authentication". key names the setting in errors.
func ReadSecret(key, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s: %s is empty", key, path)
	}
	return s, nil
}

// Apply sets the client's credentials and TLS on o, and for an embedded
// clustered server the routes' TLS and authentication.
func (s BusSecurity) Apply(o *natsbus.Options) {
	o.Auth, o.TLS = s.Auth, s.TLS
	if o.Cluster != nil {
		o.Cluster.TLS, o.Cluster.User, o.Cluster.Password = s.RouteTLS, s.RouteUser, s.RoutePassword
	}
}

// EngineKeys reads the engines' API keys: builtin is the built-in
// engines' (engines.api_key_file), perHost each engines.external[] key by
// host:port (an entry with no file maps to "": send none).
func EngineKeys(c config.EnginesConfig) (builtin string, perHost map[string]string, err error) {
	if builtin, err = ReadSecret("engines.api_key_file", c.APIKeyFile); err != nil {
		return "", nil, err
	}
	perHost = map[string]string{}
	for i, e := range c.External {
		k, err := ReadSecret(fmt.Sprintf("engines.external[%d].api_key_file", i), e.APIKeyFile)
		if err != nil {
			return "", nil, err
		}
		u, err := url.Parse(e.URL)
		if err != nil {
			return "", nil, fmt.Errorf("engines.external[%d].url: %w", i, err)
		}
		perHost[u.Host] = k
	}
	for _, raw := range c.ExternalURLs {
		if u, err := url.Parse(raw); err == nil {
			if _, ok := perHost[u.Host]; !ok {
				perHost[u.Host] = "" // routed-only engines get no key of ours
			}
		}
	}
	return builtin, perHost, nil
}
