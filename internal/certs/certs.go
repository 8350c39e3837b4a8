package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// ErrInput wraps every problem with Options.
var ErrInput = errors.New("certs: invalid input")

// Options says which certificates to make.
type Options struct {
	// Dir receives the files (created 0700 when missing).
	Dir string
	// Nodes are the node names; each gets <name>-cert.pem and <name>-key.pem.
	Nodes []string
	// Hosts are the IP addresses and DNS names the nodes are reached at
	// (every node certificate carries all of them, plus 127.0.0.1, ::1 and
	// localhost, so one set of files serves a whole small cluster).
	Hosts []string
	// Valid is how long the certificates are valid (default 365 days).
	Valid time.Duration
	// Now is the start of validity (default time.Now()); tests pass it.
	Now time.Time
}

// Files are the paths Make wrote.
type Files struct {
	CA, CAKey string
	// Cert and Key of each node, by name.
	Cert, Key map[string]string
}

// Make writes ca.pem, ca-key.pem and a certificate and key per node into
// o.Dir. Keys are written 0600. Existing files are overwritten.
func Make(o Options) (Files, error) {
	if err := o.check(); err != nil {
		return Files{}, err
	}
	o.defaults()
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("certs: %w", err)
	}
	f := Files{CA: filepath.Join(o.Dir, "ca.pem"), CAKey: filepath.Join(o.Dir, "ca-key.pem"),
		Cert: map[string]string{}, Key: map[string]string{}}
	ca, err := makeCA(o, f.CA, f.CAKey)
	if err != nil {
		return Files{}, err
	}
	ips, dns := subjectAltNames(o.Hosts)
	for _, n := range o.Nodes {
		f.Cert[n] = filepath.Join(o.Dir, n+"-cert.pem")
		f.Key[n] = filepath.Join(o.Dir, n+"-key.pem")
		if err := ca.makeNode(o, n, ips, dns, f.Cert[n], f.Key[n]); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}

// check refuses Options without a directory or nodes, and node names that
// are not plain file-name parts (or are "ca").
func (o Options) check() error {
	if o.Dir == "" {
		return fmt.Errorf("%w: the output directory is empty", ErrInput)
	}
	if len(o.Nodes) == 0 {
		return fmt.Errorf("%w: no node names (--nodes)", ErrInput)
	}
	for _, n := range o.Nodes {
		if n == "" || n == "ca" || filepath.Base(n) != n {
			return fmt.Errorf("%w: node name %q (want a plain file-name part, not \"ca\")", ErrInput, n)
		}
	}
	return nil
}

// defaults fills Valid and Now when unset.
func (o *Options) defaults() {
	if o.Valid <= 0 {
		o.Valid = 365 * 24 * time.Hour
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
}

// authority is the CA node certificates are signed by.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// makeCA creates the self-signed CA and writes its certificate to certPath
// and its key to keyPath.
func makeCA(o Options, certPath, keyPath string) (authority, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return authority{}, fmt.Errorf("certs: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "asyncrl test CA", Organization: []string{"asyncrl"}},
		NotBefore:             o.Now.Add(-time.Hour),
		NotAfter:              o.Now.Add(o.Valid),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return authority{}, fmt.Errorf("certs: CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return authority{}, fmt.Errorf("certs: CA: %w", err)
	}
	if err := writePEM(certPath, "CERTIFICATE", caDER, 0o644); err != nil {
		return authority{}, err
	}
	if err := writeKey(keyPath, caKey); err != nil {
		return authority{}, err
	}
	return authority{cert: caCert, key: caKey}, nil
}

// subjectAltNames splits hosts, plus 127.0.0.1 and ::1, into IP addresses
// and DNS names (localhost first, no duplicates, no empty names).
func subjectAltNames(hosts []string) ([]net.IP, []string) {
	var ips []net.IP
	dns := []string{"localhost"}
	for _, h := range append(slices.Clone(hosts), "127.0.0.1", "::1") {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else if h != "" && !slices.Contains(dns, h) {
			dns = append(dns, h)
		}
	}
	return ips, dns
}

// makeNode creates node n's certificate, signed by ca, valid for ips, dns
// and n, and writes it to certPath and its key to keyPath.
func (ca authority) makeNode(o Options, n string, ips []net.IP, dns []string, certPath, keyPath string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("certs: %s key: %w", n, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: n, Organization: []string{"asyncrl"}},
		NotBefore:    o.Now.Add(-time.Hour),
		NotAfter:     o.Now.Add(o.Valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  ips,
		DNSNames:     append(slices.Clone(dns), n),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("certs: %s: %w", n, err)
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	return writeKey(keyPath, key)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

func writeKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return fmt.Errorf("certs: %s: %w", path, err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, mode); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return os.Chmod(path, mode)
}
