package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/config"
)

// newConfigCmd: asyncrl config print-defaults | show FILE | validate FILE...
func newConfigCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the default run configuration or validate configuration files",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "print-defaults",
		Short: "Print every configuration key with its default and documentation, as YAML",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return config.WriteDefaults(g.stdout)
		},
	}, &cobra.Command{
		Use:   "show FILE",
		Short: "Print the effective configuration of FILE (defaults overlaid with it), as commented YAML",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := config.Load(args[0])
			if err != nil {
				return fail("%v", err)
			}
			b, err := config.Marshal(c)
			if err != nil {
				return fail("asyncrl config show: %v", err)
			}
			_, err = g.stdout.Write(b)
			return err
		},
	}, &cobra.Command{
		Use:   "validate FILE...",
		Short: `Check configuration files; prints "FILE: ok" or every problem, exits 1 on any`,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			bad := 0
			for _, f := range files {
				if _, err := config.Load(f); err != nil {
					fmt.Fprintln(g.stderr, err)
					bad++
					continue
				}
				fmt.Fprintf(g.stdout, "%s: ok\n", f)
			}
			if bad > 0 {
				return &exitErr{code: exitError} // problems already printed
			}
			return nil
		},
	})
	return cmd
}
