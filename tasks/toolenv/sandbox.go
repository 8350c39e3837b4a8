package toolenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrSandbox wraps a tool run that did not give an answer: killed at its
// wall-clock limit or by its CPU or memory limit, or failed to start.
var ErrSandbox = errors.New("toolenv: sandbox")

// ErrTimeLimit wraps (with ErrSandbox) a run killed at a time limit: the
// wall clock, or its CPU seconds (RLIMIT_CPU with soft = hard: the kernel
// sends SIGKILL, or SIGXCPU with a lower soft limit). The calculator
// counts these (chatenv.MetaToolTimeouts).
var ErrTimeLimit = errors.New("time limit")

// Sandbox runs one tool call in a child process:
//
//   - the command gets the input on stdin and nothing of the parent's
//     environment, in a fresh temporary working directory;
//   - the child limits itself before reading the input (CPUSeconds of CPU,
//     MemoryBytes of address space, no file writes, no new processes:
//     integrations/envs/asyncrl_envs/calc_sandbox.py);
//   - when this process is root, the child runs in a new, empty network
//     namespace (CLONE_NEWNET: not even a loopback that is up); otherwise
//     the tool refuses network by design (the evaluator has no way to reach
//     it), and Isolated reports false;
//   - Timeout is a wall-clock limit: the child's process group is killed
//     at it, and it dies with its parent (Pdeathsig).
type Sandbox struct {
	Command     []string
	Timeout     time.Duration
	CPUSeconds  int
	MemoryBytes int64
}

// DefaultSandbox runs the calculator evaluator under root's python: 2 s
// wall clock, 1 s CPU, 256 MiB.
func DefaultSandbox(root string) Sandbox {
	return Sandbox{Command: []string{"/usr/bin/python3", "-I", "-S", root + "/integrations/envs/asyncrl_envs/calc_sandbox.py"},
		Timeout: 2 * time.Second, CPUSeconds: 1, MemoryBytes: 256 << 20}
}

// Isolated reports whether runs get an empty network namespace.
func (s Sandbox) Isolated() bool { return os.Geteuid() == 0 }

// Run runs the command on input. A child that answers (exit 0, or its own
// "error: ..." with exit 2) gives its output; one that is killed or does
// not finish in time gives an ErrSandbox saying which limit it hit.
func (s Sandbox) Run(ctx context.Context, input string) (string, error) {
	if len(s.Command) == 0 {
		return "", fmt.Errorf("%w: no command", ErrSandbox)
	}
	dir, err := os.MkdirTemp("", "asyncrl-tool-")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrSandbox, err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	args := append(append([]string(nil), s.Command[1:]...), strconv.Itoa(s.CPUSeconds), strconv.FormatInt(s.MemoryBytes, 10))
	cmd := exec.CommandContext(ctx, s.Command[0], args...)
	cmd.Dir, cmd.Env = dir, []string{}
	cmd.Stdin = strings.NewReader(input)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if s.Isolated() {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNET
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	text := strings.TrimSpace(out.String())
	if len(text) > 512 {
		text = text[:512]
	}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("%w: %w: wall-clock limit %v reached", ErrSandbox, ErrTimeLimit, s.Timeout)
	case err == nil:
		return text, nil
	case errors.As(err, &exit) && exit.ExitCode() == 2 && strings.HasPrefix(text, "error: "):
		return text, nil
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && (ws.Signal() == syscall.SIGKILL || ws.Signal() == syscall.SIGXCPU) {
			// Only the CPU rlimit kills the child with these: the memory
			// limit makes an allocation fail (Python's MemoryError, exit 1).
			return "", fmt.Errorf("%w: %w: killed by %v at the CPU limit (%d s)", ErrSandbox, ErrTimeLimit, ws.Signal(), s.CPUSeconds)
		}
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "", fmt.Errorf("%w: killed by %v (CPU limit %d s or memory limit %d bytes)", ErrSandbox, ws.Signal(), s.CPUSeconds, s.MemoryBytes)
		}
		return "", fmt.Errorf("%w: exit %d: %s", ErrSandbox, exit.ExitCode(), lastLine(text))
	default:
		return "", fmt.Errorf("%w: %w", ErrSandbox, err)
	}
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
