package main

import "github.com/spf13/cobra"

// newWeightsCmd: asyncrl weights. Not built yet (issue 6).
func newWeightsCmd(g *globals) *cobra.Command {
	return stubCmd("weights", "Inspect, publish and fetch weight versions", 6)
}
