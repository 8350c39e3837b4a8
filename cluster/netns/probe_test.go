package netns

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/nats-io/nats.go"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
	"github.com/asyncrl/asyncrl/transport/dataplane/tcp"
)

// The test binary doubles as the programs it runs inside the namespaces
// (a Go process cannot move its own sockets into another namespace): with
// helperEnv set, TestMain runs that helper with the JSON arguments in
// argsEnv and exits.
const (
	helperEnv = "ASYNCRL_NETNS_HELPER"
	argsEnv   = "ASYNCRL_NETNS_ARGS"
)

// helperArgs are every helper's arguments (each uses its own).
type helperArgs struct {
	// dpserve, dpfetch: the data plane's listen address and TLS files
	// (empty: no TLS); dpfetch: the plan the server printed.
	Addr, CA, Cert, Key string
	Plan                messages.TransferPlan
	// probe: the intruder's probes, from its address Self.
	Probes []probe
	Self   string
	// udpecho: listen on Addr; udpping: Count probes to Target,
	// Interval apart.
	Target   string
	Count    int
	Interval time.Duration
}

// probe is one attempt of the intruder on one plane.
type probe struct {
	Plane, Kind, Target string
	// Key: a gossip key the intruder tries (base64-free raw bytes), or a
	// bearer token it sends.
	Key string
}

// result is one probe's outcome; Refused is what the test requires.
type result struct {
	Plane, Target, Detail string
	Refused               bool
}

// dpBytes is the transfer the data-plane helpers move: deterministic, so
// a fetcher in another namespace checks every byte.
func dpBytes() dataplane.Buffer {
	b := make([]byte, 4<<20)
	rand.NewChaCha8([32]byte{34}).Read(b)
	return b
}

// self is the intruder's address (its memberlist binds it).
var self string

func runHelper(mode string) int {
	var a helperArgs
	if err := json.Unmarshal([]byte(os.Getenv(argsEnv)), &a); err != nil {
		fmt.Println("ERR args:", err)
		return 2
	}
	switch mode {
	case "dpserve":
		return dpServe(a)
	case "dpfetch":
		return dpFetch(a)
	case "listen": // accept and close connections until stdin closes
		ln, err := net.Listen("tcp", a.Addr)
		if err != nil {
			fmt.Println("ERR", err)
			return 3
		}
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		fmt.Println("LISTEN", ln.Addr())
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case "udpecho":
		return udpEcho(a)
	case "udpping":
		return udpPing(a)
	case "probe":
		self = a.Self
		enc := json.NewEncoder(os.Stdout)
		for _, p := range a.Probes {
			_ = enc.Encode(p.run())
		}
		return 0
	}
	fmt.Println("ERR unknown helper", mode)
	return 2
}

func dpConfig(a helperArgs) (tcp.Config, error) {
	cfg := tcp.DefaultConfig()
	if a.Addr != "" { // a fetcher listens on nothing: keep the default
		cfg.Addr = a.Addr
	}
	cfg.Streams, cfg.MaxReconnects, cfg.IOTimeout = 2, 2, 10*time.Second
	if a.Cert != "" {
		s, c, err := tcp.MutualTLS(a.CA, a.Cert, a.Key)
		if err != nil {
			return cfg, err
		}
		cfg.ServerTLS, cfg.ClientTLS = s, c
	} else if a.CA != "" {
		// A client that trusts the cluster's CA but has no certificate.
		pem, err := os.ReadFile(a.CA)
		if err != nil {
			return cfg, err
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		cfg.ClientTLS = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}
	}
	return cfg, nil
}

// dpServe publishes dpBytes on a data plane at a.Addr, prints "PLAN
// <json>" and serves until stdin closes; a refused start prints "ERR".
func dpServe(a helperArgs) int {
	cfg, err := dpConfig(a)
	if err == nil {
		var be *tcp.Backend
		if be, err = tcp.New(cfg); err == nil {
			defer be.Close()
			src := dpBytes()
			p := messages.TransferPlan{Header: messages.Header{RunID: "netns", Sender: "n1", Version: 1}, TransferID: "weights-netns",
				Source: "n1", Destinations: []string{"n2"}, Ranges: dataplane.SplitRanges("model.safetensors", int64(len(src)), 1<<20)}
			if err = dataplane.Checksum(src, p.Ranges, dataplane.XXH3); err == nil {
				var off dataplane.Offer
				if off, err = be.Publish(context.Background(), &p, src); err == nil {
					p.URI = off.URI()
					b, _ := json.Marshal(p)
					fmt.Printf("PLAN %s\n", b)
					_, _ = io.Copy(io.Discard, os.Stdin)
					return 0
				}
			}
		}
	}
	fmt.Println("ERR", err)
	return 3
}

// dpFetch pulls a.Plan and prints "OK <bytes>" when every byte matches,
// or "ERR <error>".
func dpFetch(a helperArgs) int {
	cfg, err := dpConfig(a)
	if err == nil {
		var be *tcp.Backend
		if be, err = tcp.New(cfg); err == nil {
			defer be.Close()
			dst := make(dataplane.Buffer, len(dpBytes()))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var res dataplane.Result
			if res, err = be.Fetch(ctx, &a.Plan, dst); err == nil {
				if !bytes.Equal(dst, dpBytes()) {
					fmt.Println("ERR bytes differ")
					return 3
				}
				fmt.Println("OK", res.Bytes)
				return 0
			}
			fmt.Println("ERR", err, "received", res.Bytes)
			return 3
		}
	}
	fmt.Println("ERR", err)
	return 3
}

func (p probe) run() result {
	r := result{Plane: p.Plane, Target: p.Target}
	var err error
	switch p.Kind {
	case "tcp": // nothing may even connect
		var c net.Conn
		if c, err = net.DialTimeout("tcp", p.Target, 3*time.Second); err == nil {
			c.Close()
			r.Detail = "connected"
			return r
		}
		r.Refused, r.Detail = true, err.Error()
	case "nats":
		var nc *nats.Conn
		if nc, err = nats.Connect(p.Target, nats.Timeout(3*time.Second), nats.NoReconnect()); err == nil {
			nc.Close()
			r.Detail = "connected without credentials"
			return r
		}
		r.Refused, r.Detail = true, err.Error()
	case "gossip":
		r.Refused, r.Detail = gossipJoin(p.Target, p.Key)
	case "http":
		r.Refused, r.Detail = httpRefused(p.Target, p.Key)
	default:
		r.Detail = "unknown probe " + p.Kind
	}
	return r
}

// gossipJoin tries to join the cluster's memberlist at target with key
// (none: plaintext); refused when the join reaches no member.
func gossipJoin(target, key string) (bool, string) {
	cfg := memberlist.DefaultLANConfig()
	cfg.Name, cfg.BindAddr, cfg.BindPort, cfg.AdvertisePort = "intruder", self, 0, 0
	cfg.LogOutput = io.Discard
	if key != "" {
		cfg.SecretKey = []byte(key)
	}
	ml, err := memberlist.Create(cfg)
	if err != nil {
		return false, "memberlist: " + err.Error()
	}
	defer func() { _ = ml.Shutdown() }()
	n, err := ml.Join([]string{target})
	if err == nil && n > 0 {
		return false, fmt.Sprintf("joined %d member(s)", n)
	}
	if err == nil {
		err = errors.New("no member answered")
	}
	// Whatever answered, the intruder sees no member but itself.
	if len(ml.Members()) > 1 {
		return false, fmt.Sprintf("sees %d members", len(ml.Members()))
	}
	return true, err.Error()
}

// httpRefused GETs url with the bearer token key (none when empty);
// refused on 401/403 only: no answer proves nothing about the listener's
// guard, so it counts as not refused. A listener down for a while (the
// router between two terms) is asked again for up to 90 s.
func httpRefused(url, key string) (bool, string) {
	deadline := time.Now().Add(90 * time.Second)
	for {
		refused, detail, answered := httpOnce(url, key)
		if answered || time.Now().After(deadline) {
			return refused, detail
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func httpOnce(url, key string) (refused bool, detail string, answered bool) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error(), true
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return false, "no answer: " + err.Error(), false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	return resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden,
		fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body))), true
}

// readLine returns the first line of r that starts with prefix
// ("PLAN", "OK", "ERR"), within d.
func readLine(r io.Reader, d time.Duration, prefixes ...string) (string, error) {
	ch := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			for _, p := range prefixes {
				if strings.HasPrefix(sc.Text(), p) {
					ch <- sc.Text()
					_, _ = io.Copy(io.Discard, r)
					return
				}
			}
		}
		close(ch)
	}()
	select {
	case l, ok := <-ch:
		if !ok {
			return "", fmt.Errorf("no line starting with %v", prefixes)
		}
		return l, nil
	case <-time.After(d):
		return "", fmt.Errorf("no line starting with %v within %s", prefixes, d)
	}
}
