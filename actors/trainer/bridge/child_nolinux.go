//go:build unix && !linux

package bridge

import "syscall"

// dieWithParent: no parent-death signal outside Linux; the PyTorch worker
// exits on its own when its parent goes (asyncrl_worker/__main__.py).
func dieWithParent(*syscall.SysProcAttr) {}
