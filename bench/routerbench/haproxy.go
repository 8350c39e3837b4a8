package routerbench

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// Front ends for the routing-quality comparison against HAProxy (issue
// 22): the same engines and workload, HAProxy 2.6 (one thread) in front
// instead of the router, with the config bench/haproxy.sh uses
// (bench/haproxy/haproxy.cfg.tmpl).
const (
	// HAProxyStick: a stick table on X-Session-ID, leastconn for new
	// sessions (HAProxy's answer to sticky_least_loaded).
	HAProxyStick = "haproxy_stick"
	// HAProxyChash: balance hdr(X-Session-ID) on a consistent-hash ring
	// (HAProxy's consistent_hash).
	HAProxyChash = "haproxy_chash"
)

// IsHAProxy reports whether a policy name is one of the HAProxy fronts.
func IsHAProxy(name string) bool { return name == HAProxyStick || name == HAProxyChash }

// HAProxyConfig locates HAProxy and the config template.
type HAProxyConfig struct {
	Binary   string // haproxy
	Template string // bench/haproxy/haproxy.cfg.tmpl
}

type haproxyFront struct {
	url string
	cmd *exec.Cmd
	dir string
}

// haproxyServer is the template's name of engine i, which HAProxy returns
// in the X-Asyncrl-Replica response header (%[srv_name]).
func haproxyServer(i int) string { return "b" + strconv.Itoa(i) }

func startHAProxy(c HAProxyConfig, front string, engines []string) (*haproxyFront, error) {
	tmpl, err := template.ParseFiles(c.Template)
	if err != nil {
		return nil, fmt.Errorf("routerbench: haproxy template: %w", err)
	}
	var ports [2]int
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	var hostports []string
	for _, e := range engines {
		hostports = append(hostports, strings.TrimPrefix(e, "http://"))
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, map[string]any{"StickPort": ports[0], "ChashPort": ports[1], "Backends": hostports, "ReplicaHeader": true}); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "routerbench-haproxy-")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, buf.Bytes(), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(c.Binary, "-db", "-f", cfg)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("routerbench: starting haproxy: %w", err)
	}
	port := ports[0]
	if front == HAProxyChash {
		port = ports[1]
	}
	h := &haproxyFront{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, dir: dir}
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := http.Post(h.url+"/finish_session?session_id=probe", "text/plain", nil)
		if err == nil {
			resp.Body.Close()
			return h, nil
		}
		if time.Now().After(deadline) {
			h.stop()
			return nil, fmt.Errorf("routerbench: haproxy did not come up: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *haproxyFront) stop() {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = h.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = h.cmd.Process.Kill()
		<-done
	}
	os.RemoveAll(h.dir)
}
