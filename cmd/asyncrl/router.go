package main

import "github.com/spf13/cobra"

// newRouterCmd: asyncrl router. Not built yet (issue 4).
func newRouterCmd(g *globals) *cobra.Command {
	return stubCmd("router", "Serve the session-aware router in front of engines", 4)
}
