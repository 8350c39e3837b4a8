package tcp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// Sentinel errors of the data plane's access control.
var (
	// ErrInsecure: the server would listen off loopback without mutual
	// TLS. Anyone who reaches the port could read every published byte
	// (a model's weights) and fill the server's connections.
	ErrInsecure = errors.New("tcp: refusing to listen off loopback without mutual TLS")
	// ErrAuth: the TLS handshake failed — the peer's certificate is not
	// signed by this side's CA, or this side sent none (or one the peer
	// refused). Not retried: a redial would fail the same way.
	ErrAuth = errors.New("tcp: TLS handshake refused")
)

// MutualTLS builds the server and client TLS configs of a data plane from
// the cluster's PEM files — the same CA, certificate and key the NATS
// routes use (asyncrl security mkcerts; --cluster-tls-*): the server
// requires and verifies a client certificate signed by caFile, the client
// verifies the server's against caFile and presents its own. TLS 1.3 only.
func MutualTLS(caFile, certFile, keyFile string) (server, client *tls.Config, err error) {
	if caFile == "" || certFile == "" || keyFile == "" {
		return nil, nil, fmt.Errorf("tcp: MutualTLS needs the CA, certificate and key files (the cluster's --cluster-tls-ca, --cluster-tls-cert, --cluster-tls-key)")
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tcp: TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("tcp: TLS CA %s holds no PEM certificate", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tcp: TLS certificate %s / key %s: %w", certFile, keyFile, err)
	}
	server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	client = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, RootCAs: pool}
	return server, client, nil
}

// validateTLS: off loopback the server must require and verify client
// certificates; a ClientTLS needs roots to verify the server with.
func (c Config) validateTLS() error {
	if !isLoopback(c.Addr) {
		if c.ServerTLS == nil {
			return fmt.Errorf("%w: Config.Addr %s is off loopback: anyone who reaches it reads every published transfer; "+
				"set Config.ServerTLS and Config.ClientTLS (tcp.MutualTLS with the cluster's CA, certificate and key: --cluster-tls-*)", ErrInsecure, c.Addr)
		}
		if c.ServerTLS.ClientAuth != tls.RequireAndVerifyClientCert {
			return fmt.Errorf("%w: Config.Addr %s is off loopback and Config.ServerTLS does not require and verify client certificates "+
				"(ClientAuth: tls.RequireAndVerifyClientCert with ClientCAs; tcp.MutualTLS builds it)", ErrInsecure, c.Addr)
		}
	}
	if c.ServerTLS != nil && len(c.ServerTLS.Certificates) == 0 && c.ServerTLS.GetCertificate == nil {
		return fmt.Errorf("tcp: Config.ServerTLS has no certificate")
	}
	return nil
}

// isLoopback: host:port binds loopback only ("localhost" counts; a
// wildcard host such as ":0" or "0.0.0.0" does not). The same rule as
// internal/netx.IsLoopback, kept here so the package stays stdlib-only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// serverHandshake completes the TLS handshake of an accepted connection
// (within IOTimeout); without ServerTLS the connection is used as is.
func (s *server) handshake(c net.Conn) (net.Conn, error) {
	if s.cfg.ServerTLS == nil {
		return c, nil
	}
	tc := tls.Server(c, s.cfg.ServerTLS)
	_ = tc.SetDeadline(time.Now().Add(s.cfg.IOTimeout))
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	return tc, nil
}

// clientHandshake wraps a dialled connection in TLS when ClientTLS is set,
// verifying the server's certificate for addr's host unless the config
// names another ServerName.
func clientHandshake(ctx context.Context, cfg *tls.Config, c net.Conn, addr string) (net.Conn, error) {
	if cfg == nil {
		return c, nil
	}
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, &fatalError{err: fmt.Errorf("%w by %s (check the CA, certificate and key files): %w", ErrAuth, addr, err)}
	}
	return tc, nil
}

// authFailure turns a TLS refusal seen after the handshake into a fatal
// ErrAuth: with TLS 1.3 the server checks the client's certificate after
// the client's side of the handshake is done, so its alert arrives on the
// first read. nil when err is no TLS refusal.
func authFailure(err error, addr string) error {
	// crypto/tls reports a peer's alert as a *net.OpError "remote error"
	// (its alert type is unexported; tls.AlertError is QUIC's).
	var op *net.OpError
	var verr *tls.CertificateVerificationError
	if (errors.As(err, &op) && op.Op == "remote error") || errors.As(err, &verr) {
		return &fatalError{err: fmt.Errorf("%w by %s (check the CA, certificate and key files): %w", ErrAuth, addr, err)}
	}
	return nil
}
