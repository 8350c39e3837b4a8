package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/transport/natsbus/natstest"
)

const sbatchPath = "../../deploy/slurm/asyncrl.sbatch"

// sbatchCalls returns, per asyncrl subcommand the Slurm example runs
// ("$ASYNCRL" SUB …, continuation lines joined), the flags it passes,
// including those of a bash array named <sub>_…_args=( … ) (flags that are
// passed only sometimes).
func sbatchCalls(t *testing.T, script string) map[string][]string {
	t.Helper()
	joined := regexp.MustCompile(`\\\n\s*`).ReplaceAllString(script, " ")
	call := regexp.MustCompile(`"\$ASYNCRL" ([a-z-]+(?: [a-z]+)?)([^\n&]*)`)
	flag := regexp.MustCompile(`(?:^|\s)(--[a-z][a-z0-9-]*)`)
	calls := map[string][]string{}
	for _, m := range call.FindAllStringSubmatch(joined, -1) {
		sub := m[1]
		if f := strings.Fields(sub); len(f) == 2 && f[0] != "security" {
			sub = f[0] // "node --config": the second word is not a subcommand
		}
		for _, f := range flag.FindAllStringSubmatch(m[2], -1) {
			calls[sub] = append(calls[sub], f[1])
		}
		if _, ok := calls[sub]; !ok {
			calls[sub] = nil
		}
	}
	arrays := regexp.MustCompile(`(?s)\b([a-z]+)_[a-z_]*args=\((.*?)\)`)
	for _, m := range arrays.FindAllStringSubmatch(script, -1) {
		for _, f := range flag.FindAllStringSubmatch(m[2], -1) {
			calls[m[1]] = append(calls[m[1]], f[1])
		}
	}
	return calls
}

// The Slurm example parses (bash -n), and every flag it passes to an
// asyncrl subcommand is one that subcommand's --help lists: the script
// cannot drift from the CLI unnoticed. The calls it must make are there
// (node, run, engine-guard, security mkcerts).
func TestSlurmExampleMatchesCLI(t *testing.T) {
	raw, err := os.ReadFile(sbatchPath)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", sbatchPath).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", sbatchPath, err, out)
	}
	calls := sbatchCalls(t, string(raw))
	t.Logf("asyncrl calls and their flags: %v", calls)
	for _, want := range []string{"node", "run", "engine-guard", "security mkcerts"} {
		if _, ok := calls[want]; !ok {
			t.Errorf("the script never runs asyncrl %s (calls: %v)", want, calls)
		}
	}
	if len(calls["node"]) < 10 {
		t.Fatalf("found only %v passed to asyncrl node: the extraction is broken", calls["node"])
	}
	for sub, flags := range calls {
		code, help, errOut := cli(t, append(strings.Fields(sub), "--help")...)
		if code != 0 {
			t.Fatalf("asyncrl %s --help: code %d, %s", sub, code, errOut)
		}
		for _, f := range flags {
			if !regexp.MustCompile(`\s` + regexp.QuoteMeta(f) + `[\s=]`).MatchString(help) {
				t.Errorf("deploy/slurm/asyncrl.sbatch passes %s to asyncrl %s, which has no such flag", f, sub)
			}
		}
	}
}

// The extraction sees a flag that does not exist, so the test above can
// fail (a regexp that matched nothing would pass anything).
func TestSlurmFlagExtraction(t *testing.T) {
	calls := sbatchCalls(t, "srun -w h \\\n\t\"$ASYNCRL\" node --config c \\\n\t\t--gosip h:1 &\n\"$ASYNCRL\" security mkcerts --dir d\nnode_x_args=(\n\t--routes r\n)\n")
	if got := strings.Join(calls["node"], " "); got != "--config --gosip --routes" {
		t.Errorf("node flags %q", got)
	}
	if got := strings.Join(calls["security mkcerts"], " "); got != "--dir" {
		t.Errorf("mkcerts flags %q", got)
	}
	_, help, _ := cli(t, "node", "--help")
	if regexp.MustCompile(`\s--gosip[\s=]`).MatchString(help) {
		t.Error("node --help lists --gosip")
	}
}

// slurmShims writes test stand-ins for scontrol (show hostnames LIST:
// LIST's comma-separated names, one a line) and srun (drops its options,
// runs the command here) and returns their directory.
func slurmShims(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"scontrol": "#!/bin/sh\n[ \"$1 $2\" = \"show hostnames\" ] || exit 2\necho \"$3\" | tr ',' '\\n'\n",
		"srun":     "#!/bin/sh\nwhile [ $# -gt 0 ]; do case $1 in -w) shift 2 ;; -*) shift ;; *) break ;; esac; done\nexec \"$@\"\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The Slurm example run for real on a one-host "allocation" (localhost,
// with srun and scontrol stand-ins and free ports): it makes the secrets
// and certificates, writes the host's configuration, starts asyncrl node
// with them, and ends when the run does (--exit-when-done) with exit 0.
// A run file whose engines section lacks the host's keys is refused with
// the line to add.
func TestSlurmExampleRunsOnLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the asyncrl binary and runs a node (-short)")
	}
	bin := filepath.Join(t.TempDir(), "asyncrl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	script, err := filepath.Abs(sbatchPath)
	if err != nil {
		t.Fatal(err)
	}
	shims := slurmShims(t)
	run := func(cfg string) (code int, stdout, stderr, jobDir string) {
		dir := t.TempDir()
		cfgPath := filepath.Join(dir, "run.yaml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", script, cfgPath)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+shims+":"+os.Getenv("PATH"), "ASYNCRL="+bin,
			"SLURM_JOB_NODELIST=localhost", "SLURM_JOB_ID=7", "SLURM_SUBMIT_DIR="+dir,
			fmt.Sprintf("GOSSIP_PORT=%d", natstest.FreePort(t)), fmt.Sprintf("ROUTER_PORT=%d", natstest.FreePort(t)),
			fmt.Sprintf("METRICS_PORT=%d", natstest.FreePort(t)), fmt.Sprintf("ROUTE_PORT=%d", natstest.FreePort(t)))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// The script's node ends with the run; a hung one is killed with
		// its process group's leader (the script) after 3 minutes.
		timer := time.AfterFunc(3*time.Minute, func() { _ = cmd.Process.Kill() })
		err := cmd.Wait()
		timer.Stop()
		code = 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String(), filepath.Join(dir, "asyncrl-7")
	}

	data := t.TempDir()
	code, out, errOut, job := run("run:\n  steps: 2\n  data_dir: " + data + "\n  report_dir: " + data + "/report\n")
	if code != 0 || !strings.Contains(out, "node localhost: run complete at step 2") {
		t.Fatalf("code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	host, err := os.ReadFile(filepath.Join(job, "localhost.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(host), "listen_host: localhost\n  api_key_file: "+job+"/secrets/engine.key") {
		t.Errorf("host configuration lacks the engine keys:\n%s", host)
	}
	// Keys readable by the job's user only; certificates may be public.
	for f, private := range map[string]bool{"gossip.key": true, "engine.key": true, "router-admin-token": true,
		"route-password": true, "localhost-key.pem": true, "ca.pem": false, "localhost-cert.pem": false} {
		st, err := os.Stat(filepath.Join(job, "secrets", f))
		if err != nil {
			t.Errorf("secret %s: %v", f, err)
		} else if st.Size() == 0 || private && st.Mode().Perm()&0o077 != 0 {
			t.Errorf("secret %s: %d bytes, mode %v", f, st.Size(), st.Mode())
		}
	}
	if ev, err := os.ReadFile(filepath.Join(job, "localhost-events.jsonl")); err != nil || !strings.Contains(string(ev), "run complete at step 2") {
		t.Errorf("events file: %v\n%s", err, ev)
	}

	code, _, errOut, _ = run("engines:\n  count: 2\n")
	if code != 1 || !strings.Contains(errOut, "has a engines: section; give it this line too") || !strings.Contains(errOut, "listen_host: localhost") {
		t.Errorf("engines section without the host's keys: code %d, stderr:\n%s", code, errOut)
	}
}
