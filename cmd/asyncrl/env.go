package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/httpenv"
)

// newEnvCmd: asyncrl env — environments (tasks) on their own.
func newEnvCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Serve or list the built-in environments (tasks with programmatic rewards)",
	}
	var listen_, task string
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve a task over HTTP (GET /info, POST /reset, /step, /close) for remote rollouts",
		Long: "Serve one task over asyncrl's HTTP environment protocol (see tasks/httpenv/doc.go), so\n" +
			"rollout actors on other machines — or a server of your own in any language speaking the\n" +
			"same protocol — provide episodes.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, err := tasks.Get(task)
			if err != nil {
				return fail("asyncrl env serve: %v", err)
			}
			srv, err := httpenv.NewServer(t, httpenv.DefaultServerConfig())
			if err != nil {
				return fail("asyncrl env serve: %v", err)
			}
			ln, err := listen(g.stderr, "env", listen_)
			if err != nil {
				return fail("asyncrl env serve: %v", err)
			}
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			if err := serveHTTP(ctx, ln, srv, 5*time.Second); err != nil {
				return fail("asyncrl env serve: %v", err)
			}
			return nil
		},
	}
	serve.Flags().StringVar(&listen_, "listen", "127.0.0.1:8100", "HTTP address to serve on")
	serve.Flags().StringVar(&task, "task", "guess", "task to serve (see asyncrl env list)")
	list := &cobra.Command{
		Use:   "list",
		Short: "List the registered tasks with their turn and token limits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range tasks.Names() {
				t, err := tasks.Get(name)
				if err != nil {
					return fail("asyncrl env list: %v", err)
				}
				cmd.Printf("%-10s turns=%-3d tokens/turn=%d\n", name, t.MaxTurns(), t.MaxTokensPerTurn())
			}
			return nil
		},
	}
	cmd.AddCommand(serve, list)
	return cmd
}
