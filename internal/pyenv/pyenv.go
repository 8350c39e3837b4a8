// Package pyenv is a test helper: it starts a Python chat-environment
// server of integrations/envs (python3 -m asyncrl_envs) for a Go test and
// stops it when the test ends.
package pyenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Python is Debian's interpreter, the one integrations/ targets.
const Python = "/usr/bin/python3"

// Root is the module root found from the working directory.
func Root(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatal("pyenv: no go.mod above the working directory")
		}
	}
}

// Start serves spec ("module:attr", imported from integrations/envs and
// integrations/envs/tests) and returns its base URL and the process (a
// test may kill it). Skipped when the interpreter is missing.
func Start(t testing.TB, spec string) (string, *os.Process) {
	t.Helper()
	return StartAt(t, spec, "127.0.0.1:0")
}

// StartAt is Start listening on listen (host:port).
func StartAt(t testing.TB, spec, listen string) (string, *os.Process) {
	t.Helper()
	if _, err := os.Stat(Python); err != nil {
		t.Skipf("%s not installed", Python)
	}
	base, p, err := Spawn(t, spec, listen)
	if err != nil {
		t.Fatal(err)
	}
	return base, p
}

// Spawn is StartAt returning its failure instead of failing t, so a test
// may call it off the test goroutine (a fault schedule that starts a
// killed server's successor on the same address); t's cleanup still
// kills the process.
func Spawn(t testing.TB, spec, listen string) (string, *os.Process, error) {
	root := Root(t)
	cmd := exec.Command(Python, "-m", "asyncrl_envs", "--env", spec, "--listen", listen)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "integrations", "envs")+":"+filepath.Join(root, "integrations", "envs", "tests"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, fmt.Errorf("pyenv: %s: %w", spec, err)
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("pyenv: %s: %w", spec, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		return "", nil, fmt.Errorf("pyenv: %s on %s said %q: %v", spec, listen, line, err)
	}
	return base, cmd.Process, nil
}
