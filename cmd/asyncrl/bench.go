package main

import "github.com/spf13/cobra"

// newBenchCmd: asyncrl bench. Not built yet (issue 4).
func newBenchCmd(g *globals) *cobra.Command {
	return stubCmd("bench", "Run workloads and benchmarks", 4)
}
