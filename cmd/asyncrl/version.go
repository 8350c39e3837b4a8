package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/internal/buildinfo"
)

// versionLine is "asyncrl VERSION GOVERSION OS/ARCH", e.g.
// "asyncrl v0.1.0 go1.26.0 linux/amd64".
func versionLine() string {
	return fmt.Sprintf("asyncrl %s %s %s/%s", buildinfo.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// newVersionCmd: asyncrl version.
func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the asyncrl version, Go version and OS/architecture",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(g.stdout, versionLine())
			return err
		},
	}
}
