package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

const sbatchPath = "../../deploy/slurm/asyncrl.sbatch"

// sbatchCalls returns, per asyncrl subcommand the Slurm example runs
// ("$ASYNCRL" SUB …, continuation lines joined), the flags it passes.
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
	calls := sbatchCalls(t, "srun -w h \\\n\t\"$ASYNCRL\" node --config c \\\n\t\t--gosip h:1 &\n\"$ASYNCRL\" security mkcerts --dir d\n")
	if got := strings.Join(calls["node"], " "); got != "--config --gosip" {
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
