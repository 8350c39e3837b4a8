package config

import (
	"net/url"
	"slices"
)

// BusConfig says which NATS server carries the control plane.
type BusConfig struct {
	// NATSURL is an external NATS server (nats://host:4222); empty starts an
	// embedded server in-process, bound to 127.0.0.1 on a random port.
	NATSURL string `yaml:"nats_url" doc:"external NATS server URL (nats://, tls://, ws://, wss://); empty = embedded server on 127.0.0.1"`
	// JetStreamDir stores the embedded server's JetStream data (trajectory
	// buffer, prompt ledger, versions); empty = <run.data_dir>/jetstream.
	JetStreamDir string `yaml:"jetstream_dir" doc:"JetStream store of the embedded server; empty = <run.data_dir>/jetstream"`
	// MaxPayloadBytes is the largest message; bulk data above it goes on a
	// data plane. NATS itself refuses more than 64 MiB.
	MaxPayloadBytes int `yaml:"max_payload_bytes" doc:"largest bus message in bytes (bulk data above it uses a data plane); at most 64 MiB"`

	// The client's credentials: at most one of CredsFile, NKeySeedFile,
	// User (+ PasswordFile) and TokenFile. Secrets live in files only, so
	// this section (printed into every run report) never holds one.
	User         string `yaml:"user" doc:"NATS user name to connect as (its password in password_file); see docs/security.md"`
	PasswordFile string `yaml:"password_file" doc:"file holding the NATS user's password (never printed)"`
	TokenFile    string `yaml:"token_file" doc:"file holding a NATS token (never printed)"`
	CredsFile    string `yaml:"creds_file" doc:"NATS credentials file (JWT + nkey seed, as nsc writes)"`
	NKeySeedFile string `yaml:"nkey_seed_file" doc:"file holding a NATS user nkey seed (SU...)"`
	// TLS of client connections: with nats_url the CA verifying the server
	// (and this client's certificate when the server asks for one); with
	// the embedded server its client listener's certificate.
	TLSCA   string `yaml:"tls_ca" doc:"PEM CA that verifies the NATS server's certificate"`
	TLSCert string `yaml:"tls_cert" doc:"PEM client certificate (embedded server: its client listener's certificate)"`
	TLSKey  string `yaml:"tls_key" doc:"PEM key of tls_cert"`
	// Route security of clustered embedded servers (asyncrl node
	// --cluster-listen): required off loopback.
	ClusterTLSCA      string `yaml:"cluster_tls_ca" doc:"PEM CA every cluster member's route certificate must verify against (mutual TLS; required when --cluster-listen is off loopback)"`
	ClusterTLSCert    string `yaml:"cluster_tls_cert" doc:"PEM certificate of this member's routes"`
	ClusterTLSKey     string `yaml:"cluster_tls_key" doc:"PEM key of cluster_tls_cert"`
	RouteUser         string `yaml:"route_user" doc:"user every cluster member authenticates its routes with (required when --cluster-listen is off loopback)"`
	RoutePasswordFile string `yaml:"route_password_file" doc:"file holding the route password (the same on every member; never printed)"`
	// RolePermissions makes a node's embedded server admit only a user
	// whose permissions cover the node's roles' subjects, and the node
	// connect as it (docs/security.md has the table).
	RolePermissions bool `yaml:"role_permissions" doc:"embedded server: the node connects as a user allowed only its roles' subjects (docs/security.md); with nats_url give each node a role user instead"`
}

// natsMaxPayloadLimit is the NATS server's hard limit on max_payload.
const natsMaxPayloadLimit = 64 << 20

// DefaultBus is an embedded server with NATS's recommended 8 MiB payloads
// (the server default is 1 MiB; token batches of a few thousand sequences
// fit in 8).
func DefaultBus() BusConfig {
	return BusConfig{MaxPayloadBytes: 8 << 20}
}

// Validate checks the bus section.
func (c BusConfig) Validate() error {
	v := checker{section: "bus"}
	if c.NATSURL != "" {
		u, err := url.Parse(c.NATSURL)
		if err != nil || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme) || u.Host == "" {
			v.fail("nats_url", "%q is not a nats://, tls://, ws:// or wss:// URL with a host", c.NATSURL)
		}
	}
	n := 0
	for _, set := range []bool{c.User != "" || c.PasswordFile != "", c.TokenFile != "", c.CredsFile != "", c.NKeySeedFile != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		v.fail("user", "set one of user (+ password_file), token_file, creds_file and nkey_seed_file")
	}
	if c.PasswordFile != "" && c.User == "" {
		v.fail("password_file", "needs user")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		v.fail("tls_cert", "tls_cert and tls_key go together")
	}
	if (c.ClusterTLSCert == "") != (c.ClusterTLSKey == "") {
		v.fail("cluster_tls_cert", "cluster_tls_cert and cluster_tls_key go together")
	}
	if (c.RouteUser == "") != (c.RoutePasswordFile == "") {
		v.fail("route_user", "route_user and route_password_file go together")
	}
	if c.RolePermissions && c.NATSURL != "" {
		v.fail("role_permissions", "applies to the embedded server; with nats_url connect as a role user (user, password_file) the server's config defines")
	}
	if c.MaxPayloadBytes < 1 || c.MaxPayloadBytes > natsMaxPayloadLimit {
		v.fail("max_payload_bytes", "must be in [1, %d], got %d", natsMaxPayloadLimit, c.MaxPayloadBytes)
	}
	return v.err()
}
