package tcp

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/rs/zerolog"
)

// Config configures the TCP data plane, both its server (Publish) and its
// client (Fetch) side.
type Config struct {
	// Addr is the listen address of the server started by the first
	// Publish. Default "127.0.0.1:0" (loopback, any port): reaching other
	// nodes is an explicit choice.
	Addr string
	// Advertise is the host put into published URIs instead of the listen
	// address's, for a server listening on all interfaces (Addr ":0") or
	// behind a name peers resolve. Empty uses the listen address.
	Advertise string
	// Streams is how many parallel connections one Fetch opens (>= 1).
	// Several streams fill a fat link that one TCP flow cannot, and let
	// ranges verify on several cores. Default 4.
	Streams int
	// ChunkBytes is the unit of reads, writes and rate-limit accounting
	// (>= 4 KiB). Default 4 MiB.
	ChunkBytes int
	// BytesPerSecond caps the server's total send rate (all connections);
	// 0 is unlimited.
	BytesPerSecond int64
	// MaxReconnects is how many broken connections one Fetch survives
	// before it fails with ErrIncomplete (>= 0). Default 8.
	MaxReconnects int
	// Backoff is the first wait before redialling; it doubles per attempt
	// of a stream up to 1 s. Default 20 ms.
	Backoff time.Duration
	// IOTimeout bounds each read and write: a peer silent for longer is
	// treated as a broken connection (and resumed). Default 30 s.
	IOTimeout time.Duration
	// Dial opens client connections; nil uses a net.Dialer. Tests inject
	// connections that break mid-transfer here.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ServerTLS, when set, runs the server's connections over TLS; for
	// mutual TLS (required off loopback) it must require and verify
	// client certificates. MutualTLS builds it from the cluster's files.
	// Without it the server speaks plain TCP, and only on loopback.
	ServerTLS *tls.Config
	// ClientTLS, when set, runs Fetch's connections over TLS: it verifies
	// the server's certificate (for the URI's host unless ServerName is
	// set) and presents this side's. A certificate refused either way
	// fails the fetch at once with ErrAuth (no redial).
	ClientTLS *tls.Config
	// Logger receives reconnect warnings and server errors. Default: zerolog.Nop().
	Logger zerolog.Logger
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		Addr:          "127.0.0.1:0",
		Streams:       4,
		ChunkBytes:    4 << 20,
		MaxReconnects: 8,
		Backoff:       20 * time.Millisecond,
		IOTimeout:     30 * time.Second,
		Logger:        zerolog.Nop(),
	}
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Addr == "":
		return fmt.Errorf("tcp: Config.Addr must be host:port, got empty")
	case c.Streams < 1:
		return fmt.Errorf("tcp: Config.Streams must be >= 1, got %d", c.Streams)
	case c.ChunkBytes < 4096:
		return fmt.Errorf("tcp: Config.ChunkBytes must be >= 4096, got %d", c.ChunkBytes)
	case c.BytesPerSecond < 0:
		return fmt.Errorf("tcp: Config.BytesPerSecond must be >= 0 (0 = unlimited), got %d", c.BytesPerSecond)
	case c.MaxReconnects < 0:
		return fmt.Errorf("tcp: Config.MaxReconnects must be >= 0, got %d", c.MaxReconnects)
	case c.Backoff < 0:
		return fmt.Errorf("tcp: Config.Backoff must be >= 0, got %v", c.Backoff)
	case c.IOTimeout <= 0:
		return fmt.Errorf("tcp: Config.IOTimeout must be > 0, got %v", c.IOTimeout)
	}
	return c.validateTLS()
}
