package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/buildinfo"
)

// cli runs the command tree in-process and returns exit code and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = execute(args, &out, &errb)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVersion(t *testing.T) {
	old := buildinfo.Version
	buildinfo.Version = "v9.8.7-test"
	t.Cleanup(func() { buildinfo.Version = old })
	want := fmt.Sprintf("asyncrl v9.8.7-test %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	code, out, errOut := cli(t, "version")
	if code != 0 || out != want || errOut != "" {
		t.Errorf("version: code %d, stdout %q, stderr %q; want 0, %q", code, out, errOut, want)
	}
	if code, out, _ := cli(t, "--version"); code != 0 || out != want {
		t.Errorf("--version: code %d, stdout %q; want %q", code, out, want)
	}
}

func TestConfigPrintDefaultsLoadsBack(t *testing.T) {
	code, out, errOut := cli(t, "config", "print-defaults")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	got, err := config.Load(writeFile(t, "defaults.yaml", out))
	if err != nil {
		t.Fatalf("printed defaults do not load: %v", err)
	}
	if !reflect.DeepEqual(got, config.Default()) {
		t.Error("printed defaults do not equal config.Default()")
	}
	if !strings.Contains(out, "  # S: a group generated at step i may be trained at most at step i+S (SkyRL: 4)\n  max_staleness_steps: 2\n") {
		t.Errorf("doc comment missing above max_staleness_steps:\n%s", out)
	}
}

func TestConfigValidate(t *testing.T) {
	good := writeFile(t, "good.yaml", "trainer:\n  mini_batch_size: 2\n  num_parallel_generation_workers: 4\n")
	bad := writeFile(t, "bad.yaml", "trainer:\n  max_stalness_steps: 4\n")
	invalid := writeFile(t, "invalid.yaml", "router:\n  policy: fastest\n")

	code, out, errOut := cli(t, "config", "validate", good)
	if code != 0 || out != good+": ok\n" || errOut != "" {
		t.Errorf("good file: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = cli(t, "config", "validate", bad)
	if want := bad + ":2: trainer.max_stalness_steps: unknown key (did you mean max_staleness_steps?)\n"; code != 1 || out != "" || errOut != want {
		t.Errorf("bad file: code %d, stdout %q, stderr %q; want 1, %q", code, out, errOut, want)
	}
	code, out, errOut = cli(t, "config", "validate", good, invalid)
	wantErr := invalid + `:2: router.policy: "fastest" is not one of bounded_sticky, sticky_least_loaded, consistent_hash, round_robin, least_request` + "\n"
	if code != 1 || out != good+": ok\n" || errOut != wantErr {
		t.Errorf("good+invalid: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	code, _, errOut = cli(t, "config", "validate", missing)
	if code != 1 || errOut != missing+": no such file or directory\n" {
		t.Errorf("missing file: code %d, stderr %q", code, errOut)
	}
	if code, _, errOut := cli(t, "config", "validate"); code != 1 || !strings.Contains(errOut, "requires at least 1 arg") {
		t.Errorf("no file: code %d, stderr %q", code, errOut)
	}
}

func TestRunLoadsConfigFirst(t *testing.T) {
	bad := writeFile(t, "bad.yaml", "run:\n  stepz: 3\n")
	code, _, errOut := cli(t, "run", "--config", bad)
	if want := "asyncrl run: " + bad + ":2: run.stepz: unknown key (did you mean steps?)\n"; code != 1 || errOut != want {
		t.Errorf("bad config: code %d, stderr %q; want %q", code, errOut, want)
	}
	if code, _, errOut := cli(t, "run", "--steps", "0"); code != 1 || errOut != "asyncrl run: run.steps: must be ≥ 1, got 0\n" {
		t.Errorf("--steps 0: code %d, stderr %q", code, errOut)
	}
	// The flag fixes what the file got wrong: the override precedes
	// validation. The run is real (3 steps, a few seconds); its files go
	// to temporary directories.
	data, rep := t.TempDir(), filepath.Join(t.TempDir(), "report")
	zero := writeFile(t, "zero.yaml", "run:\n  steps: 0\n  data_dir: "+data+"\n")
	code, out, errOut := cli(t, "run", "--config", zero, "--steps", "3", "--seed", "5", "--report", rep, "--log-level", "debug", "--log-format", "json")
	if code != 0 || !strings.Contains(out, "steps 3, final version 3") || !strings.Contains(out, "trajectories lost 0") {
		t.Errorf("override: code %d, stdout %q, stderr %q", code, out, lastLines(errOut, 5))
	}
	// Debug logging shows the effective values, proving the flags applied.
	for _, want := range []string{`"steps":3`, `"seed":5`, `"message":"config loaded"`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("debug run: stderr lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(rep, "summary.json")); err != nil {
		t.Errorf("no summary.json: %v", err)
	}
	// B > W is rejected before anything starts, with the rule in the message.
	bw := writeFile(t, "bw.yaml", "trainer:\n  mini_batch_size: 8\n  num_parallel_generation_workers: 4\n")
	code, _, errOut = cli(t, "run", "--config", bw)
	if code != 1 || !strings.Contains(errOut, "trainer.num_parallel_generation_workers: 4 is outside [mini_batch_size, mini_batch_size·(max_staleness_steps+1)] = [8, 24] (B=8, S=2)") {
		t.Errorf("B > W: code %d, stderr %q", code, errOut)
	}
	// A dataset with a malformed line names the file and the line.
	ds := writeFile(t, "prompts.jsonl", "{\"id\":\"a\",\"text\":\"rev ab=\"}\n{\"id\": \"b\", oops}\n")
	dsCfg := writeFile(t, "ds.yaml", "rollout:\n  task: reverse\n  dataset: "+ds+"\n")
	code, _, errOut = cli(t, "run", "--config", dsCfg)
	if code != 1 || !strings.Contains(errOut, ds+":2:") {
		t.Errorf("bad dataset: code %d, stderr %q; want the file and line 2", code, errOut)
	}
}

func TestWorkerTrainerNeedsNATS(t *testing.T) {
	code, _, errOut := cli(t, "worker", "trainer")
	if code != 1 || !strings.Contains(errOut, "--nats URL is required") {
		t.Errorf("worker trainer without --nats: code %d, stderr %q", code, errOut)
	}
}

// lastLines returns the last n lines of s (long debug logs in failures).
func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

func TestEngineFlags(t *testing.T) {
	fs := pflag.NewFlagSet("engine", pflag.ContinueOnError)
	f := addEngineFlags(fs)
	if f.Listen != "127.0.0.1:8001" || f.Weights != "" || f.Seed != 1 || f.Config != "" {
		t.Errorf("defaults: %+v", *f)
	}
	if err := fs.Parse([]string{"--listen", "127.0.0.1:9100", "--weights", "/w", "--seed", "42", "--config", "c.yaml"}); err != nil {
		t.Fatal(err)
	}
	if *f != (engineFlags{Listen: "127.0.0.1:9100", Weights: "/w", Seed: 42, Config: "c.yaml"}) {
		t.Errorf("parsed: %+v", *f)
	}
	if code, _, errOut := cli(t, "engine", "--listen", "8001"); code != 1 || errOut != "asyncrl engine: --listen \"8001\" is not a host:port address\n" {
		t.Errorf("bad listen: code %d, stderr %q", code, errOut)
	}
}

func TestCobraErrors(t *testing.T) {
	code, _, errOut := cli(t, "frobnicate")
	if code != 1 || !strings.HasPrefix(errOut, `Error: unknown command "frobnicate" for "asyncrl"`) || !strings.HasSuffix(errOut, "Run 'asyncrl --help' for usage.\n") {
		t.Errorf("unknown command: code %d, stderr %q", code, errOut)
	}
	code, _, errOut = cli(t, "version", "--bogus")
	if code != 1 || errOut != "Error: unknown flag: --bogus\nRun 'asyncrl version --help' for usage.\n" {
		t.Errorf("unknown flag: code %d, stderr %q", code, errOut)
	}
}

func TestBadLogFlags(t *testing.T) {
	code, _, errOut := cli(t, "--log-level", "loud", "version")
	if want := "asyncrl: --log-level: logx: unknown log level \"loud\" (want debug, info, warn or error)\n"; code != 1 || errOut != want {
		t.Errorf("bad level: code %d, stderr %q; want %q", code, errOut, want)
	}
	code, _, errOut = cli(t, "--log-format", "xml", "run")
	if want := "asyncrl: --log-format: logx: unknown log format \"xml\" (want auto, json or console)\n"; code != 1 || errOut != want {
		t.Errorf("bad format: code %d, stderr %q; want %q", code, errOut, want)
	}
}

func TestHelpListsEverySubcommand(t *testing.T) {
	code, out, _ := cli(t, "--help")
	if code != 0 {
		t.Fatalf("help exit %d", code)
	}
	for _, name := range []string{"run", "node", "router", "engine", "worker", "weights", "sim", "chaos", "bench", "config", "version"} {
		if !strings.Contains(out, "\n  "+name+" ") {
			t.Errorf("help lacks %s:\n%s", name, out)
		}
	}
}

func TestStubValidatesConfig(t *testing.T) {
	bad := writeFile(t, "bad.yaml", "routr: {}\n")
	code, _, errOut := cli(t, "node", "--name", "n1", "--config", bad)
	if want := "asyncrl node: " + bad + ":1: routr: unknown key (did you mean router?)\n"; code != 1 || errOut != want {
		t.Errorf("node --config bad: code %d, stderr %q; want %q", code, errOut, want)
	}
}

func TestConfigShow(t *testing.T) {
	path := writeFile(t, "run.yaml", "run:\n  steps: 7\nrouter:\n  policy: round_robin\n")
	code, out, errOut := cli(t, "config", "show", path)
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := config.Load(writeFile(t, "shown.yaml", out))
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("shown config does not reload to the file's config: %v", err)
	}
	if !strings.Contains(out, "\n  steps: 7\n") || !strings.Contains(out, "\n  policy: round_robin\n") {
		t.Errorf("shown config lacks the file's values:\n%s", out)
	}
	bad := writeFile(t, "bad.yaml", "run:\n  steps: x\n")
	if code, _, errOut := cli(t, "config", "show", bad); code != 1 || errOut != bad+":2: run.steps: want an integer, got \"x\"\n" {
		t.Errorf("bad file: code %d, stderr %q", code, errOut)
	}
}
