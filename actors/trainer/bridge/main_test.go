package bridge

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

// The test binary doubles as the trainer child: with ASYNCRL_TEST_BRIDGE_CHILD
// set it serves frames on stdin/stdout with the built-in trainer, and the
// variables below inject faults (each fault fires once per marker directory
// unless noted):
//
//	ASYNCRL_TEST_CHILD_DIE_AT=N     SIGKILL itself after step N's state is written, before the reply
//	ASYNCRL_TEST_CHILD_HANG_AT=N    block forever at the start of step N
//	ASYNCRL_TEST_CHILD_DIE_ALWAYS=N SIGKILL itself at the start of step N, every time
//	ASYNCRL_TEST_CHILD_MARKS=DIR    where "this fault already fired" is recorded
//	ASYNCRL_TEST_CHILD_STEPS=FILE   append each step about to be answered (state written, no fault fired)
func TestMain(m *testing.M) {
	if os.Getenv("ASYNCRL_TEST_BRIDGE_CHILD") != "" {
		os.Exit(runTestChild())
	}
	if os.Getenv(parentEnv) != "" {
		os.Exit(runTestParent())
	}
	goleak.VerifyTestMain(m)
}

func envStep(name string) int64 {
	n, err := strconv.ParseInt(os.Getenv(name), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// once reports whether the fault name fires now (first time per marks dir).
func once(name string) bool {
	p := filepath.Join(os.Getenv("ASYNCRL_TEST_CHILD_MARKS"), name)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

func runTestChild() int {
	fmt.Fprintln(os.Stderr, "test child: serving frames v1")
	dieAt, hangAt, dieAlways := envStep("ASYNCRL_TEST_CHILD_DIE_AT"), envStep("ASYNCRL_TEST_CHILD_HANG_AT"), envStep("ASYNCRL_TEST_CHILD_DIE_ALWAYS")
	c := &BuiltinChild{Hook: func(step int64, phase string) {
		switch {
		case phase == PhaseStart && step == dieAlways:
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		case phase == PhaseStart && step == hangAt && once(fmt.Sprint("hang-", step)):
			select {}
		case phase == PhaseSaved && step == dieAt && once(fmt.Sprint("die-", step)):
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		case phase == PhaseSaved:
			if p := os.Getenv("ASYNCRL_TEST_CHILD_STEPS"); p != "" {
				f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				if err == nil {
					fmt.Fprintln(f, step)
					f.Close()
				}
			}
		}
	}}
	if err := c.Serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "test child:", err)
		return 1
	}
	return 0
}
