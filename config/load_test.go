package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestParseErrors pins the exact message of every kind of bad file: the
// format is FILE:LINE: PATH: MSG.
func TestParseErrors(t *testing.T) {
	const policies = "bounded_sticky, sticky_least_loaded, consistent_hash, round_robin, least_request"
	tests := []struct {
		name, yaml, want string
		kind             error
	}{
		{"unknown nested key with suggestion", "trainer:\n  max_stalness_steps: 4\n",
			"run.yaml:2: trainer.max_stalness_steps: unknown key (did you mean max_staleness_steps?)", ErrUnknownKey},
		{"unknown top-level key with suggestion", "trainr:\n  dp_size: 2\n",
			"run.yaml:1: trainr: unknown key (did you mean trainer?)", ErrUnknownKey},
		{"unknown top-level key without suggestion", "run:\n  steps: 3\ncolour: blue\n",
			"run.yaml:3: colour: unknown key", ErrUnknownKey},
		{"unknown nested key without suggestion", "router:\n  zebra: 1\n",
			"run.yaml:2: router.zebra: unknown key", ErrUnknownKey},
		{"camelCase key", "trainer:\n  maxStalenessSteps: 3\n",
			"run.yaml:2: trainer.maxStalenessSteps: unknown key (did you mean max_staleness_steps?)", ErrUnknownKey},
		{"key in the wrong section", "rollout:\n  policy: round_robin\n",
			"run.yaml:2: rollout.policy: unknown key (did you mean router.policy?)", ErrUnknownKey},
		{"string where an int goes", "trainer:\n  mini_batch_size: four\n",
			`run.yaml:2: trainer.mini_batch_size: want an integer, got "four"`, ErrType},
		{"float where an int goes", "trainer:\n  mini_batch_size: 2.5\n",
			"run.yaml:2: trainer.mini_batch_size: want an integer, got 2.5", ErrType},
		{"int too big for any int", "run:\n  seed: 99999999999999999999999\n",
			"run.yaml:2: run.seed: want an integer, got 99999999999999999999999", ErrType},
		{"string where a number goes", "engines:\n  time_scale: fast\n",
			`run.yaml:2: engines.time_scale: want a number, got "fast"`, ErrType},
		{"bare number as duration", "router:\n  session_ttl: 7200\n",
			`run.yaml:2: router.session_ttl: want a duration such as "90s", got 7200`, ErrType},
		{"unparsable duration", "router:\n  session_ttl: soon\n",
			`run.yaml:2: router.session_ttl: want a duration such as "90s", got "soon"`, ErrType},
		{"scalar where a section goes", "router: fast\n",
			`run.yaml:1: router: want a mapping, got "fast"`, ErrType},
		{"scalar where a list goes", "cluster:\n  join: 10.0.0.1:7946\n",
			`run.yaml:2: cluster.join: want a list, got "10.0.0.1:7946"`, ErrType},
		{"list where a string goes", "run:\n  id: [a, b]\n",
			"run.yaml:2: run.id: want a string, got a list", ErrType},
		{"yes is not a bool", "trainer:\n  normalize_over_support: yes\n",
			`run.yaml:2: trainer.normalize_over_support: want true or false, got "yes"`, ErrType},
		{"top level not a mapping", "- run\n",
			"run.yaml:1: want a mapping, got a list", ErrType},
		{"duplicate key", "run:\n  steps: 3\n  steps: 4\n",
			"run.yaml:3: run.steps: duplicate key (first set on line 2)", ErrSyntax},
		{"bad yaml", "run:\n  steps: 3\n bad: x\n",
			"run.yaml:2: did not find expected key", ErrSyntax},
		{"two documents", "run:\n  steps: 3\n---\nrun:\n  steps: 4\n",
			"run.yaml:3: a config file holds one YAML document, found a second", ErrSyntax},
		{"merge key", "base: &b {steps: 3}\nrun:\n  <<: *b\n",
			"run.yaml:1: base: unknown key\nrun.yaml:3: run.<<: merge keys (<<) are not supported; write the keys out (anchors and aliases on values work)", ErrUnknownKey},
		{"enum value", "router:\n  policy: fastest\n",
			`run.yaml:2: router.policy: "fastest" is not one of ` + policies, ErrInvalid},
		{"enum in a list", "cluster:\n  roles: [engine, gpu]\n",
			`run.yaml:2: cluster.roles[1]: "gpu" is not one of all, bus, router, engine, rollout, filter, trainer, publisher`, ErrInvalid},
		{"negative steps", "run:\n  steps: -3\n",
			"run.yaml:2: run.steps: must be ≥ 1, got -3", ErrInvalid},
		{"zero max_sample_batches", "filter:\n  max_sample_batches: 0\n",
			"run.yaml:2: filter.max_sample_batches: must be -1 (no limit) or ≥ 1, got 0", ErrInvalid},
		{"staleness rule", "trainer:\n  mini_batch_size: 8\n  num_parallel_generation_workers: 4\n  max_staleness_steps: 1\n",
			"run.yaml:3: trainer.num_parallel_generation_workers: 4 is outside [mini_batch_size, mini_batch_size·(max_staleness_steps+1)] = [8, 16] (B=8, S=1): set it in that range, or leave it out for 16 (two steps' worth, within the bound)", ErrInvalid},
		{"cross-field error on a section", "engines:\n  count: 0\n",
			"run.yaml:1: engines: no engines: set count ≥ 1 or list external (or external_urls)", ErrInvalid},
		{"invalid default exposed by another key has no line", "publisher:\n  store: s3\n",
			"run.yaml: publisher.s3_bucket: must be set when store is s3", ErrInvalid},
		{"key left out of a list entry points at the entry", "engines:\n  external:\n    - {url: \"http://a:1\"}\n",
			"run.yaml:3: engines.external[0].kind: required: say which server it is: vllm (vllm serve), sglang (python -m sglang.launch_server) or builtin (asyncrl engine)", ErrInvalid},
		{"several errors, one per line", "run:\n  stepz: 3\nrouter:\n  policyy: x\n",
			"run.yaml:2: run.stepz: unknown key (did you mean steps?)\nrun.yaml:4: router.policyy: unknown key (did you mean policy?)", ErrUnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("run.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded, want %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got: %s\nwant: %s", err, tt.want)
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("errors.Is(err, %v) = false", tt.kind)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "run.yaml" {
				t.Errorf("errors.As(*Error) failed or wrong file: %#v", ce)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := Load(path)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v, want fs.ErrNotExist", err)
	}
	if want := path + ": no such file or directory"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
}

func TestLoadReportsFileName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("router:\n  polcy: round_robin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if want := path + ":2: router.polcy: unknown key (did you mean policy?)"; err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}

// TestLoadOverlaysDefaults checks that a file changes exactly the keys it
// names, that null keeps a default, and that anchors/aliases resolve.
func TestLoadOverlaysDefaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.yaml")
	src := `
run:
  id: exp-7
  steps: &n 50
  seed:
router:
  policy: consistent_hash
  session_ttl: 90s
engines:
  count: 0
  external_urls: ["http://10.0.0.5:8000", "https://vllm.example:443"]
trainer:
  mini_batch_size: 2
  num_parallel_generation_workers: 6
  max_staleness_steps: *n
  normalize_over_support: true
  learning_rate: 3e-6
cluster:
  roles:
    - engine
    - router
`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Run.ID = "exp-7"
	want.Run.Steps = 50
	want.Router.Policy = PolicyConsistentHash
	want.Router.SessionTTL = 90 * time.Second
	want.Engines.Count = 0
	want.Engines.ExternalURLs = []string{"http://10.0.0.5:8000", "https://vllm.example:443"}
	want.Trainer.MiniBatchSize = 2
	want.Trainer.NumParallelGenerationWorkers = 6
	want.Trainer.MaxStalenessSteps = 50
	want.Trainer.NormalizeOverSupport = true
	want.Trainer.LearningRate = 3e-6
	want.Cluster.Roles = []Role{RoleEngine, RoleRouter}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load overlay mismatch:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseEmptyIsDefaults(t *testing.T) {
	for _, src := range []string{"", "# only a comment\n", "~\n"} {
		got, err := Parse("empty.yaml", []byte(src))
		if err != nil {
			t.Fatalf("Parse(%q): %v", src, err)
		}
		if !reflect.DeepEqual(got, Default()) {
			t.Errorf("Parse(%q) != Default()", src)
		}
	}
}

// TestPrintDefaultsRoundTrip: print-defaults output loads back to Default().
func TestPrintDefaultsRoundTrip(t *testing.T) {
	var b strings.Builder
	if err := WriteDefaults(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "defaults.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatalf("print-defaults output does not load: %v\n%s", err, b.String())
	}
	if !reflect.DeepEqual(got, Default()) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", got, Default())
	}
}

// TestMarshalRoundTripNonDefault guards the printer on values the defaults
// don't exercise (odd durations, tiny floats, lists, strings needing quotes).
func TestMarshalRoundTripNonDefault(t *testing.T) {
	c := Default()
	c.Router.SessionTTL = 90*time.Minute + 1500*time.Millisecond
	c.Filter.ZeroVarianceTol = 1e-12
	c.Trainer.LearningRate = 3.5e-7
	c.Rollout.Dataset = "data/prompts: #1.jsonl"
	c.Run.Seed = -42
	c.Run.DataDir = "data\n\n"  // last key of a section: its newlines must not eat the blank line
	c.Cluster.NodeName = "\t\n" // yaml's own Encode cannot re-read its output for this
	c.Cluster.Join = []string{"10.0.0.1:7946", "[::1]:7946"}
	c.Publisher.Store = StoreS3
	c.Publisher.S3Bucket = "true" // a string that looks like a bool
	b, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse("m.yaml", b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v\n%s", got, c, b)
	}
}

// TestLoadWithOverride: the override runs before validation, so a flag can
// fix a value the file got wrong, and its own bad values are reported.
func TestLoadWithOverride(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(path, []byte("run:\n  steps: 0\n  seed: 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || err.Error() != path+":2: run.steps: must be ≥ 1, got 0" {
		t.Fatalf("Load without override: %v", err)
	}
	got, err := LoadWith(path, func(c *Config) { c.Run.Steps = 7 })
	if err != nil {
		t.Fatal(err)
	}
	if got.Run.Steps != 7 || got.Run.Seed != 9 {
		t.Errorf("steps, seed = %d, %d; want 7, 9", got.Run.Steps, got.Run.Seed)
	}
}

// TestParseExternalEngines reads engines.external as a list of mappings,
// with count 0 (the run drives only engines started elsewhere), and
// refuses an unknown key inside an entry with its path.
func TestParseExternalEngines(t *testing.T) {
	cfg, err := Parse("run.yaml", []byte(`engines:
  count: 0
  external:
    - {url: "http://127.0.0.1:8001", kind: vllm, weight_load: delta, tokenizer: /models/qwen/tokenizer.json}
    - url: http://10.0.0.7:8000
      kind: vllm
      model: asyncrl-policy
      tokenizer: /models/qwen/tokenizer.json
      weight_load: full
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []ExternalEngine{
		{URL: "http://127.0.0.1:8001", Kind: EngineVLLM, WeightLoad: LoadDelta, Tokenizer: "/models/qwen/tokenizer.json"},
		{URL: "http://10.0.0.7:8000", Kind: EngineVLLM, Model: "asyncrl-policy", Tokenizer: "/models/qwen/tokenizer.json", WeightLoad: LoadFull},
	}
	if !reflect.DeepEqual(cfg.Engines.External, want) || cfg.Engines.Count != 0 {
		t.Fatalf("engines = count %d external %+v, want count 0 external %+v", cfg.Engines.Count, cfg.Engines.External, want)
	}
	_, err = Parse("run.yaml", []byte("engines:\n  external:\n    - {url: \"http://a:1\", kind: vllm, weight_load: full, port: 3}\n"))
	if err == nil || !strings.Contains(err.Error(), "engines.external[0].port") {
		t.Fatalf("unknown key in an entry: err = %v, want one naming engines.external[0].port", err)
	}
}

// TestContextDefaults: fields a file leaves out take defaults chosen by
// what it does say — a file listing only engines.external [{url, kind}]
// drives only those engines (count 0) with each kind's weight load, a file
// that sets count keeps it, and a file that changes the batch keeps the
// staleness rule B ≤ W ≤ B·(S+1) without naming W. A key set to null keeps
// its default as if absent.
func TestContextDefaults(t *testing.T) {
	tests := []struct {
		name, yaml string
		count      int
		loads      []WeightLoad
		workers    int
	}{
		{"only external", `engines:
  external:
    - {url: "http://127.0.0.1:8001", kind: vllm}
    - {url: "http://127.0.0.1:8002", kind: builtin}
    - {url: "http://127.0.0.1:30000", kind: sglang}
`, 0, []WeightLoad{LoadDelta, LoadDelta, LoadFull}, 8},
		{"explicit load kept", "engines:\n  external:\n    - {url: \"http://a:1\", kind: vllm, weight_load: full}\n",
			0, []WeightLoad{LoadFull}, 8},
		{"count set beside external", "engines:\n  count: 1\n  external:\n    - {url: \"http://a:1\", kind: vllm}\n",
			1, []WeightLoad{LoadDelta}, 8},
		{"count null is left out", "engines:\n  count:\n  external:\n    - {url: \"http://a:1\", kind: vllm}\n",
			0, []WeightLoad{LoadDelta}, 8},
		{"no external", "run:\n  steps: 3\n", 2, nil, 8},
		{"bigger batch", "trainer:\n  mini_batch_size: 16\n", 2, nil, 32},
		{"batch at staleness 0", "trainer:\n  mini_batch_size: 16\n  max_staleness_steps: 0\n", 2, nil, 16},
		{"workers set", "trainer:\n  mini_batch_size: 16\n  num_parallel_generation_workers: 20\n", 2, nil, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("run.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			var loads []WeightLoad
			for _, e := range cfg.Engines.External {
				loads = append(loads, e.WeightLoad)
			}
			if cfg.Engines.Count != tt.count || !reflect.DeepEqual(loads, tt.loads) || cfg.Trainer.NumParallelGenerationWorkers != tt.workers {
				t.Fatalf("count %d loads %v workers %d, want %d %v %d", cfg.Engines.Count, loads, cfg.Trainer.NumParallelGenerationWorkers, tt.count, tt.loads, tt.workers)
			}
		})
	}
	// The fixed default is the context default of the fixed B and S, so a
	// file that leaves the trainer alone runs what print-defaults shows.
	if d := DefaultTrainer(); d.NumParallelGenerationWorkers != DefaultGenerationWorkers(d.MiniBatchSize, d.MaxStalenessSteps) {
		t.Fatalf("DefaultTrainer W %d, DefaultGenerationWorkers %d", d.NumParallelGenerationWorkers, DefaultGenerationWorkers(d.MiniBatchSize, d.MaxStalenessSteps))
	}
	// An entry built in Go (no file) may leave weight_load empty: it is
	// valid and means the kind's default.
	c := Default()
	c.Engines.Count = 0
	c.Engines.External = []ExternalEngine{{URL: "http://a:1", Kind: EngineSGLang}, {URL: "http://b:1", Kind: EngineVLLM}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if a, b := c.Engines.External[0].EffectiveLoad(), c.Engines.External[1].EffectiveLoad(); a != LoadFull || b != LoadDelta {
		t.Fatalf("effective loads %s, %s; want full, delta", a, b)
	}
}
