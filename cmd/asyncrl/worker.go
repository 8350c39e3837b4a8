package main

import "github.com/spf13/cobra"

// newWorkerCmd: asyncrl worker. Not built yet (issue 5).
func newWorkerCmd(g *globals) *cobra.Command {
	return stubCmd("worker", "Run an external trainer worker", 5)
}
