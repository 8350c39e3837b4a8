package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/internal/certs"
)

// TestClusterSecureWalkthrough is docs/security.md's three-node walkthrough
// as a test (make test-cluster): three asyncrl node processes whose
// embedded servers route over mutual TLS with route authentication
// (certificates made now, with internal/certs, as `asyncrl security
// mkcerts` makes them) and admit only each node's role user
// (--role-permissions). The run trains to the end with a clean ledger;
// a fourth server with the right CA but no route credentials, and one
// without TLS, never join the NATS cluster: their nodes fail to start.
func TestClusterSecureWalkthrough(t *testing.T) {
	e2eEnabled(t)
	const steps = 6
	c := newE2ECluster(t, steps)
	cdir := filepath.Join(c.dir, "certs")
	f, err := certs.Make(certs.Options{Dir: cdir, Nodes: []string{"n1", "n2", "n3", "intruder"}})
	if err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(cdir, "route-password")
	if err := os.WriteFile(pw, []byte("walkthrough-route-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.extra = func(i int) []string {
		n := fmt.Sprintf("n%d", i+1)
		return []string{"--cluster-tls-ca", f.CA, "--cluster-tls-cert", f.Cert[n], "--cluster-tls-key", f.Key[n],
			"--route-user", "asyncrl", "--route-password-file", pw, "--role-permissions"}
	}
	trainers := []*proc{c.start(0, "trainer,engine"), c.start(1, "trainer")}
	n3 := c.start(2, "engine,rollout")
	holder, _, hname, _ := pickHolder(t, trainers, 2)

	// Intruders: route to the three servers from a fourth one, with the
	// cluster's CA and a valid certificate but no route password, and with
	// no TLS at all. Neither joins, so neither's JetStream ever forms and
	// its node gives up.
	port := clustertest.FreePorts(t, 1)[0]
	for _, in := range []struct {
		name  string
		extra []string
	}{
		{"no route password", []string{"--cluster-tls-ca", f.CA, "--cluster-tls-cert", f.Cert["intruder"], "--cluster-tls-key", f.Key["intruder"]}},
		{"no TLS", nil},
	} {
		args := append([]string{"node", "--log-level", "warn", "--name", "intruder", "--roles", "bus", "--gossip", "127.0.0.1:0",
			"--cluster-listen", "127.0.0.1:" + strconv.Itoa(port), "--routes", strings.Join(c.routes, ",")}, in.extra...)
		cfgFile := filepath.Join(c.dir, "intruder.yaml")
		if err := os.WriteFile(cfgFile, fmt.Appendf(nil, "run:\n  data_dir: %s\n", filepath.Join(c.dir, "intruder")), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", cfgFile)
		p := startProc(t, exec.Command(c.bin, args...), "intruder ("+in.name+")")
		select {
		case <-p.Exited:
		case <-time.After(120 * time.Second):
			t.Fatalf("intruder (%s) still running after 120 s: it joined?\n%s", in.name, p.Out.String())
		}
		if strings.Contains(p.Out.String(), "node intruder: gossip ") {
			t.Errorf("intruder (%s) got past the bus:\n%s", in.name, p.Out.String())
		}
		t.Logf("intruder (%s) refused: %s", in.name, clustertest.LastLines(p.ErrOut.String(), 1))
	}

	clustertest.WaitFor(t, 180*time.Second, hname+" to finish the run", func() bool {
		return strings.Contains(holder.Out.String(), "ledger prompts")
	})
	checkLedgerLine(t, holder.Out.String(), steps)
	for _, p := range append(trainers, n3) {
		all := p.Out.String() + p.ErrOut.String()
		if strings.Contains(all, "walkthrough-route-pw") {
			t.Error("a node printed the route password")
		}
		if strings.Contains(all, "Permissions Violation") {
			t.Errorf("a node met a permission violation:\n%s", clustertest.LastLines(p.ErrOut.String(), 10))
		}
	}
}
