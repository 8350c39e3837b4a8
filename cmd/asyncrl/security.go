package main

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/cluster/access"
	"github.com/asyncrl/asyncrl/internal/certs"
)

// newSecurityCmd: asyncrl security — certificates and the role table for
// running a cluster off loopback (docs/security.md).
func newSecurityCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "security",
		Short: "Make TLS certificates and route passwords; print the bus role table",
		Long: "Helpers for running asyncrl off loopback (docs/security.md): mkcerts makes a private CA,\n" +
			"one certificate per node for the bus's routes (and client TLS), and a route password file;\n" +
			"roles prints which subjects each node role may publish and subscribe to.",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newMkcertsCmd(g), newRolesCmd(g))
	return cmd
}

func newMkcertsCmd(g *globals) *cobra.Command {
	var dir, nodes, hosts string
	var valid time.Duration
	cmd := &cobra.Command{
		Use:   "mkcerts",
		Short: "Make a CA, a certificate per node and a route password file",
		Long: "Write ca.pem, ca-key.pem, <node>-cert.pem and <node>-key.pem for every --nodes name\n" +
			"(each certificate names every --hosts address, plus loopback, and serves as both a route\n" +
			"server and client), and route-password (random, 0600) into --dir. Copy the CA, the node's\n" +
			"certificate and key and the route password to each node; keep ca-key.pem offline.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ns := splitList(nodes)
			f, err := certs.Make(certs.Options{Dir: dir, Nodes: ns, Hosts: splitList(hosts), Valid: valid})
			if err != nil {
				return fail("asyncrl security mkcerts: %v", err)
			}
			pw := filepath.Join(dir, "route-password")
			if err := os.WriteFile(pw, []byte(rand.Text()+"\n"), 0o600); err != nil {
				return fail("asyncrl security mkcerts: %v", err)
			}
			fmt.Fprintf(g.stdout, "CA %s (key %s: keep it offline)\n", f.CA, f.CAKey)
			for _, n := range ns {
				fmt.Fprintf(g.stdout, "node %s: --cluster-tls-cert %s --cluster-tls-key %s --cluster-tls-ca %s\n", n, f.Cert[n], f.Key[n], f.CA)
			}
			fmt.Fprintf(g.stdout, "route password: --route-password-file %s (the same file on every node)\n", pw)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "dir", "certs", "output `DIR`")
	fs.StringVar(&nodes, "nodes", "", "comma-separated node `NAMES` (one certificate each; required)")
	fs.StringVar(&hosts, "hosts", "", "comma-separated IP addresses and DNS `NAMES` the nodes are reached at")
	fs.DurationVar(&valid, "valid", 365*24*time.Hour, "validity of the certificates")
	return cmd
}

func newRolesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "roles",
		Short: "Print the bus role table: what each node role may publish and subscribe to",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, r := range access.Table() {
				fmt.Fprintf(g.stdout, "%s (roles %s): %s\n  publish:   %s\n", r.Kind, strings.Join(r.Roles, ", "), r.Why, strings.Join(r.Publish, " "))
				if len(r.Deny) > 0 {
					fmt.Fprintf(g.stdout, "  deny:      %s\n", strings.Join(r.Deny, " "))
				}
				fmt.Fprintf(g.stdout, "  subscribe: %s\n", strings.Join(r.Subscribe, " "))
			}
			fmt.Fprintln(g.stdout, "every user may also publish one reply to each request it receives (allow_responses).")
			return nil
		},
	}
}

// splitList splits a comma-separated flag, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
