// Package buildinfo holds the version stamped into the binary by the linker
// (make build sets Version with -ldflags "-X ...Version=...").
package buildinfo

// Version is the asyncrl release; "dev" for an unstamped build.
var Version = "dev"
