package natsbus

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/transport"
)

// DefaultMaxPayload is the largest control message the embedded server
// accepts (8 MiB). Bulk data (weights, token batches) moves on data planes, so
// this only has to fit the largest control envelope with room to spare.
const DefaultMaxPayload = 8 << 20

// Options configures Connect. The zero value is not usable; start from
// DefaultOptions.
type Options struct {
	// URL of an external NATS server ("nats://host:4222"). Empty starts an
	// embedded in-process server on 127.0.0.1 with a random port and
	// JetStream enabled.
	URL string
	// Host is the interface the embedded server listens on (default
	// 127.0.0.1; set a routable address only when other nodes must connect).
	Host string
	// Port of the embedded server; 0 or -1 picks a random free port.
	Port int
	// StoreDir is where the embedded server keeps JetStream files. Empty
	// creates a fresh temporary directory, removed again by Close.
	StoreDir string
	// MaxPayload is the embedded server's max_payload in bytes (default
	// DefaultMaxPayload). With an external URL the server's advertised
	// max_payload applies instead and this field is ignored.
	MaxPayload int
	// Name identifies this client (and the embedded server) in server
	// monitoring; use the node id.
	Name string
	// Logger receives this package's logs; the embedded server's own logs
	// are bridged to it at debug level when the logger is enabled for debug.
	// Default zerolog.Nop().
	Logger zerolog.Logger
	// ConnectTimeout bounds dialling the server (default 5s).
	ConnectTimeout time.Duration
	// ReadyTimeout bounds waiting for the embedded server to accept
	// connections (default 10s).
	ReadyTimeout time.Duration
	// ReconnectWait is the pause between reconnect attempts (default 250ms).
	ReconnectWait time.Duration
	// MaxReconnects is how many reconnect attempts are made after a lost
	// connection; -1 retries forever (default -1: long RL jobs should ride
	// out a server restart rather than die). 0 in hand-built Options also
	// means the default.
	MaxReconnects int
	// DrainTimeout bounds draining subscriptions on Close (default 5s).
	DrainTimeout time.Duration
	// PendingMsgs and PendingBytes bound what the client buffers for one
	// subscription while its handler is busy (an actor bridge waits for
	// mailbox room: overload slows admission and the backlog waits here).
	// Past either limit NATS drops the subscription's messages; natsbus
	// counts them (SlowConsumerDrops, asyncrl_bus_slow_consumer_dropped_total)
	// and logs them (rate-limited). Defaults 1,048,576 messages and 256 MiB,
	// above nats.go's 500,000 and 64 MiB: a backlog of finished groups
	// (tens of KiB each at 131,072 trajectories in flight) must wait, not be
	// dropped. -1 is unlimited (memory is then the bound); 0 the default.
	PendingMsgs, PendingBytes int
	// Cluster, when set, makes the embedded server join a NATS cluster
	// (multi-node). Ignored with an external URL.
	Cluster *ClusterOptions
	// Auth is this client's credentials (an external server's user, or one
	// of the embedded server's Users). Never printed.
	Auth Auth
	// TLS: with an external URL, the CA that verifies the server and this
	// client's certificate (when the server asks for one). With an embedded
	// server, its client listener's certificate and key (required with a
	// Host off loopback) and the CA this client verifies it with.
	TLS TLSFiles
	// Users of the embedded server, each with its subject permissions.
	// Empty: no client authentication (loopback only).
	Users []User
}

// ClusterOptions configures route clustering of the embedded server.
type ClusterOptions struct {
	// Name of the cluster; every member must use the same one.
	Name string
	// Listen is the host:port the server accepts routes on ("127.0.0.1:6222";
	// port 0 or -1 picks a random port).
	Listen string
	// Routes are the members' route URLs ("nats-route://10.0.0.2:6222"). At
	// least one is required; give every member the same full list (a route
	// to itself is detected and ignored). Members' Options.Name must differ:
	// it is the JetStream server name.
	Routes []string
	// TLS secures the routes: this member's certificate and key, and the CA
	// every member's certificate must verify against (mutual TLS). Required
	// with a Listen off loopback.
	TLS TLSFiles
	// User and Password authenticate routes: every member sends them and
	// accepts only them. Required with a Listen off loopback. Never printed.
	User, Password string
}

// DefaultOptions returns options for an embedded server with defaults.
func DefaultOptions() Options {
	return Options{
		Host:           "127.0.0.1",
		MaxPayload:     DefaultMaxPayload,
		Name:           "asyncrl",
		Logger:         zerolog.Nop(),
		ConnectTimeout: 5 * time.Second,
		ReadyTimeout:   10 * time.Second,
		ReconnectWait:  250 * time.Millisecond,
		MaxReconnects:  -1,
		DrainTimeout:   5 * time.Second,
		PendingMsgs:    DefaultPendingMsgs,
		PendingBytes:   DefaultPendingBytes,
	}
}

// Default per-subscription pending limits (Options.PendingMsgs, PendingBytes).
const (
	DefaultPendingMsgs  = 1 << 20
	DefaultPendingBytes = 256 << 20
)

// withDefaults fills zero fields, so callers that build Options by hand get
// the same behaviour as DefaultOptions.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.MaxPayload == 0 {
		o.MaxPayload = d.MaxPayload
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Name == "" {
		o.Name = d.Name
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = d.ConnectTimeout
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = d.ReadyTimeout
	}
	if o.ReconnectWait == 0 {
		o.ReconnectWait = d.ReconnectWait
	}
	if o.MaxReconnects == 0 {
		o.MaxReconnects = d.MaxReconnects
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = d.DrainTimeout
	}
	if o.PendingMsgs == 0 {
		o.PendingMsgs = d.PendingMsgs
	}
	if o.PendingBytes == 0 {
		o.PendingBytes = d.PendingBytes
	}
	return o
}

// maxServerPayload is nats-server's hard upper limit for max_payload.
const maxServerPayload = 64 << 20

// Validate checks the options, naming the field and the allowed values.
func (o Options) Validate() error {
	if o.MaxPayload < 0 || o.MaxPayload > maxServerPayload {
		return fmt.Errorf("natsbus: MaxPayload %d out of range (allowed 1..%d bytes, 0 for the default)", o.MaxPayload, maxServerPayload)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"ConnectTimeout", o.ConnectTimeout}, {"ReadyTimeout", o.ReadyTimeout}, {"ReconnectWait", o.ReconnectWait}, {"DrainTimeout", o.DrainTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("natsbus: %s %v out of range (allowed >= 0, 0 for the default)", d.field, d.v)
		}
	}
	if o.Port < -1 || o.Port > 65535 {
		return fmt.Errorf("natsbus: Port %d out of range (allowed -1 or 0 for random, 1..65535)", o.Port)
	}
	if o.PendingMsgs < -1 {
		return fmt.Errorf("natsbus: PendingMsgs %d out of range (allowed -1 for unlimited, 0 for the default, or > 0)", o.PendingMsgs)
	}
	if o.PendingBytes < -1 {
		return fmt.Errorf("natsbus: PendingBytes %d out of range (allowed -1 for unlimited, 0 for the default, or > 0)", o.PendingBytes)
	}
	if o.MaxReconnects < -1 {
		return fmt.Errorf("natsbus: MaxReconnects %d out of range (allowed -1 for forever, or >= 0)", o.MaxReconnects)
	}
	if err := o.validateSecurity(); err != nil {
		return err
	}
	if c := o.Cluster; c != nil && o.URL == "" {
		if err := transport.ValidToken(c.Name); err != nil {
			return fmt.Errorf("natsbus: Cluster.Name: %w", err)
		}
		if _, _, err := splitHostPort(c.Listen); err != nil {
			return fmt.Errorf("natsbus: Cluster.Listen %q: %w (want host:port)", c.Listen, err)
		}
		if len(c.Routes) == 0 {
			return fmt.Errorf("natsbus: Cluster.Routes is empty (clustered JetStream needs the members' route URLs; listing this node too is fine)")
		}
	}
	return nil
}

func splitHostPort(hp string) (string, int, error) {
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, err
	}
	if h == "" {
		h = "127.0.0.1"
	}
	return h, port, nil
}
