package main

import "github.com/spf13/cobra"

// newChaosCmd: asyncrl chaos. Not built yet (issue 8).
func newChaosCmd(g *globals) *cobra.Command {
	return stubCmd("chaos", "Run chaos tests (faults on the bus, engines, nodes)", 8)
}
