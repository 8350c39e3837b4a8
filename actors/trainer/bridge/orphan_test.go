package bridge

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// parentEnv makes the test binary a parent that starts children with
// StartChild (the argv in the variable, split on spaces, n times), prints
// "pid N" for each and blocks: the test SIGKILLs it like a node.
const parentEnv = "ASYNCRL_TEST_BRIDGE_PARENT"

func runTestParent() int {
	argv := strings.Fields(os.Getenv(parentEnv))
	for range 2 {
		c, err := StartChild(Spec{Argv: argv}, zerolog.Nop())
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("pid", c.Pid())
	}
	// Goroutines that lock a thread and end take that thread with them:
	// the parent-death signal must not fire on such an exit (StartChild
	// holds the forking thread for the child's life).
	for range 8 {
		done := make(chan struct{})
		go func() { runtime.LockOSThread(); close(done) }()
		<-done
	}
	fmt.Println("ready")
	select {}
}

// gone reports whether pid no longer runs: no such process, or a zombie
// nobody reaped yet (a container's init may not reap orphans).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return os.IsNotExist(err)
	}
	// pid (comm) state …: comm may hold spaces and parentheses
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// TestChildrenDieWithTheirParent: a process that started trainer
// children with StartChild is SIGKILLed (no chance to kill them itself):
// its children — here plain sleeps, which watch nothing — are gone within
// seconds, also after goroutines locked to threads ended in the parent.
func TestChildrenDieWithTheirParent(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's; elsewhere the PyTorch worker watches its parent")
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep command")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), parentEnv+"="+sleep+" 300")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "ready" {
		f := strings.Fields(sc.Text())
		if len(f) != 2 || f[0] != "pid" {
			t.Fatalf("parent said %q", sc.Text())
		}
		pid, _ := strconv.Atoi(f[1])
		pids = append(pids, pid)
	}
	if len(pids) != 2 {
		t.Fatalf("parent started %d children, want 2", len(pids))
	}
	for _, pid := range pids {
		if gone(pid) {
			t.Fatalf("child %d is gone before its parent died", pid)
		}
		defer syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // cleanup if the test fails
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for !gone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("child %d still runs 10 s after its parent was SIGKILLed", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
