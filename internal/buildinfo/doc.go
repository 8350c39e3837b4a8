// Package buildinfo holds the version stamped into the binary by the linker
// (make build sets Version with -ldflags "-X ...Version=...").
package buildinfo
