package bridge

import "syscall"

// dieWithParent: the kernel SIGKILLs the child when the thread that
// started it ends — with this process, SIGKILL included (StartChild holds
// that thread for the child's life). The PyTorch worker also watches its
// parent (asyncrl_worker/__main__.py) for systems without this.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
