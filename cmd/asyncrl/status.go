package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/asyncrl/asyncrl/cluster/status"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/wiring"
)

// statusFlags are asyncrl status's flags.
type statusFlags struct {
	config   string
	nats     string
	run      string
	once     bool
	wait     time.Duration
	interval time.Duration
	bus      busSecurityFlags
}

// addClient registers the client half of busSecurityFlags (status joins
// no NATS cluster, so the route flags do not apply).
func (b *busSecurityFlags) addClient(fs *pflag.FlagSet) {
	fs.StringVar(&b.user, "nats-user", "", "NATS `USER` to connect as (bus.user; password in --nats-password-file)")
	fs.StringVar(&b.passwordFile, "nats-password-file", "", "`FILE` holding the NATS user's password (bus.password_file)")
	fs.StringVar(&b.tokenFile, "nats-token-file", "", "`FILE` holding a NATS token (bus.token_file)")
	fs.StringVar(&b.creds, "nats-creds", "", "NATS credentials `FILE` (bus.creds_file)")
	fs.StringVar(&b.nkey, "nats-nkey", "", "`FILE` holding a NATS user nkey seed (bus.nkey_seed_file)")
	fs.StringVar(&b.ca, "nats-tls-ca", "", "PEM CA `FILE` verifying the NATS server (bus.tls_ca)")
	fs.StringVar(&b.cert, "nats-tls-cert", "", "PEM client certificate `FILE` (bus.tls_cert)")
	fs.StringVar(&b.key, "nats-tls-key", "", "PEM key `FILE` of --nats-tls-cert (bus.tls_key)")
}

// newStatusCmd: asyncrl status — a live terminal view of a running
// cluster, read from its bus (cluster/status).
func newStatusCmd(g *globals) *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a running cluster: members, lease holder, term, step, engines, groups in flight",
		Long: "Connect to the cluster's NATS (--nats) and show what its nodes publish: the members\n" +
			"(live name claims), the trainer lease's holder and token, the term it announces, the\n" +
			"last step (live, and the fenced durable one), every engine with the version it serves\n" +
			"and acknowledged, and the groups in flight (the controller's count and each rollout\n" +
			"node's). It only reads: it creates no stream or bucket. The screen is redrawn every\n" +
			"--interval until interrupted; --once prints one snapshot after --wait and exits (for\n" +
			"scripts). See docs/deploy.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.nats == "" {
				return fail("asyncrl status: --nats is required (the URL of the cluster's NATS, e.g. nats://nats:4222)")
			}
			if f.wait <= 0 || f.interval <= 0 {
				return fail("asyncrl status: --wait and --interval must be > 0 (got %s, %s)", f.wait, f.interval)
			}
			changed := cmd.Flags().Changed
			cfg, err := loadConfig(f.config, func(c *config.Config) { f.bus.apply(&c.Bus, changed) })
			if err != nil {
				return fail("asyncrl status: %v", err)
			}
			sec, err := wiring.BusSecurityFrom(cfg.Bus)
			if err != nil {
				return fail("asyncrl status: %v", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := natsbus.DefaultOptions()
			opts.URL, opts.Name, opts.Auth, opts.TLS = f.nats, "asyncrl-status", sec.Auth, sec.TLS
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			bus, err := natsbus.Connect(cctx, opts)
			cancel()
			if err != nil {
				return fail("asyncrl status: connect to %s: %v", f.nats, err)
			}
			defer func() { _ = bus.Close() }()
			w, err := status.NewWatcher(bus.Conn(), cmp.Or(f.run, cfg.Run.ID), time.Now)
			if err != nil {
				return fail("asyncrl status: %v", err)
			}
			defer w.Close()
			if f.once {
				return statusOnce(ctx, w, f.wait, g.stdout)
			}
			return statusLive(ctx, w, f.interval, g.stdout)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.nats, "nats", "", "`URL`s of the cluster's NATS (comma-separated; required)")
	fs.StringVar(&f.config, "config", "", "run configuration `FILE` (its run.id and bus credentials; default: built-in defaults)")
	fs.StringVar(&f.run, "run", "", "run `ID` to show (default run.id of --config, else the default run id)")
	fs.BoolVar(&f.once, "once", false, "print one snapshot after --wait and exit")
	fs.DurationVar(&f.wait, "wait", 3*time.Second, "with --once, how long to listen before printing (the holder announces its term and engines their state once a second)")
	fs.DurationVar(&f.interval, "interval", time.Second, "how often the live view is redrawn")
	f.bus.addClient(fs)
	return cmd
}

// statusOnce listens for wait (the announcements are periodic: a shorter
// look may miss the term or an engine), then prints one snapshot.
func statusOnce(ctx context.Context, w *status.Watcher, wait time.Duration, out io.Writer) error {
	w.Poll(ctx)
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(wait):
	}
	w.Poll(ctx)
	_, err := io.WriteString(out, status.Render(w.Snapshot()))
	return err
}

// statusLive redraws until ctx ends: in place on a terminal, one snapshot
// after another (separated by a blank line) when piped.
func statusLive(ctx context.Context, w *status.Watcher, interval time.Duration, out io.Writer) error {
	tty := false
	if f, ok := out.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		w.Poll(ctx)
		text := status.Render(w.Snapshot())
		if tty {
			text = "\x1b[H\x1b[2J" + text // home, clear screen
		} else {
			text += "\n"
		}
		if _, err := io.WriteString(out, text); err != nil {
			return fmt.Errorf("asyncrl status: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
