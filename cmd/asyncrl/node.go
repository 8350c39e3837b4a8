package main

import "github.com/spf13/cobra"

// newNodeCmd: asyncrl node. Not built yet (issue 7).
func newNodeCmd(g *globals) *cobra.Command {
	return stubCmd("node", "Run this machine as a cluster node (membership, role placement)", 7)
}
