package main

import "github.com/spf13/cobra"

// newSimCmd: asyncrl sim. Not built yet (issue 8).
func newSimCmd(g *globals) *cobra.Command {
	return stubCmd("sim", "Run a deterministic simulation of a whole run", 8)
}
