//go:build !linux

package netns

import (
	"errors"
	"os"
)

// openTUN: TUN devices in network namespaces are Linux's.
func openTUN(ns, dev string) (*os.File, error) {
	return nil, errors.New("netns: the userspace impairer needs Linux (TUN devices in network namespaces)")
}
