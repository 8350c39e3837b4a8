package config

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default() is invalid: %v", err)
	}
}

// allFields lists every config field by dotted path with its struct field.
func allFields(t reflect.Type, prefix string, out map[string]reflectField) {
	for i := range t.NumField() {
		sf := t.Field(i)
		key, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		p := joinPath(prefix, key)
		out[p] = reflectField{sf}
		if sf.Type.Kind() == reflect.Struct && sf.Type != durationType {
			allFields(sf.Type, p, out)
		}
	}
}

type reflectField struct{ reflect.StructField }

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// TestEveryFieldDocumented: every field has a snake_case yaml key and a doc tag.
func TestEveryFieldDocumented(t *testing.T) {
	fields := map[string]reflectField{}
	allFields(reflect.TypeFor[Config](), "", fields)
	if len(fields) < 90 {
		t.Fatalf("found only %d fields; the walk is broken", len(fields))
	}
	for p, f := range fields {
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !snakeCase.MatchString(key) {
			t.Errorf("%s (%s): yaml key %q is not snake_case", p, f.Name, key)
		}
		if strings.TrimSpace(f.Tag.Get("doc")) == "" {
			t.Errorf("%s (%s): no doc tag", p, f.Name)
		}
	}
}

// TestPrintDefaultsListsEveryField reflects over Config and checks that the
// printed YAML has every key at its path, with its doc as the comment above.
func TestPrintDefaultsListsEveryField(t *testing.T) {
	var b strings.Builder
	if err := WriteDefaults(&b); err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(b.String()), &doc); err != nil {
		t.Fatal(err)
	}
	printed := map[string]string{} // path → head comment
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := joinPath(prefix, k.Value)
			printed[p] = k.HeadComment
			if v.Kind == yaml.MappingNode {
				walk(v, p)
			}
		}
	}
	walk(doc.Content[0], "")
	fields := map[string]reflectField{}
	allFields(reflect.TypeFor[Config](), "", fields)
	for p, f := range fields {
		c, ok := printed[p]
		if !ok {
			t.Errorf("print-defaults lacks %s", p)
			continue
		}
		if !strings.Contains(c, f.Tag.Get("doc")) {
			t.Errorf("%s: comment %q lacks its doc %q", p, c, f.Tag.Get("doc"))
		}
	}
	if len(printed) != len(fields) {
		t.Errorf("printed %d keys, config has %d fields", len(printed), len(fields))
	}
	if !strings.Contains(b.String(), "  # replica selection policy [bounded_sticky|sticky_least_loaded|consistent_hash|round_robin|least_request]\n  policy: bounded_sticky\n") {
		t.Errorf("enum comment missing or misplaced:\n%s", b.String())
	}
}

func TestStalenessRule(t *testing.T) {
	tests := []struct {
		b, w, s int
		ok      bool
	}{
		{4, 8, 2, true},
		{4, 4, 0, true},   // W = B: synchronous-like
		{4, 5, 0, false},  // W > B·(S+1) = 4
		{4, 12, 2, true},  // W = B·(S+1)
		{4, 13, 2, false}, // one over
		{4, 3, 2, false},  // W < B: a step could never fill
		{2, 4, 1, true},   // SkyRL's example
		{1, 1, 0, true},
	}
	for _, tt := range tests {
		c := DefaultTrainer()
		c.MiniBatchSize, c.NumParallelGenerationWorkers, c.MaxStalenessSteps = tt.b, tt.w, tt.s
		err := c.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("B=%d W=%d S=%d: err = %v, want ok=%v", tt.b, tt.w, tt.s, err, tt.ok)
		}
	}
}

// TestValidateMessages pins messages of Validate on in-memory configs (no
// file, so no FILE:LINE prefix).
func TestValidateMessages(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"enum", func(c *Config) { c.Router.Policy = "fastest" },
			`router.policy: "fastest" is not one of bounded_sticky, sticky_least_loaded, consistent_hash, round_robin, least_request`},
		{"staleness", func(c *Config) {
			c.Trainer.MiniBatchSize, c.Trainer.NumParallelGenerationWorkers, c.Trainer.MaxStalenessSteps = 8, 4, 1
		}, "trainer.num_parallel_generation_workers: 4 is outside [mini_batch_size, mini_batch_size·(max_staleness_steps+1)] = [8, 16] (B=8, S=1): set it in that range, or leave it out for 16 (two steps' worth, within the bound)"},
		{"negative count", func(c *Config) { c.Engines.Count = -1 }, "engines.count: must be ≥ 0, got -1"},
		{"non-positive duration", func(c *Config) { c.Router.SweepInterval = 0 }, "router.sweep_interval: must be a positive duration, got 0s"},
		{"ratio out of range", func(c *Config) { c.Filter.MinReplaceRatio = 1.5 }, "filter.min_replace_ratio: must be in [0, 1], got 1.5"},
		{"top_k zero", func(c *Config) { c.Rollout.TopK = 0 }, "rollout.top_k: must be -1 (no limit) or ≥ 1, got 0"},
		{"top_p zero", func(c *Config) { c.Rollout.TopP = 0 }, "rollout.top_p: must be in (0, 1], got 0"},
		{"learning rate", func(c *Config) { c.Trainer.LearningRate = 0 }, "trainer.learning_rate: must be > 0, got 0"},
		{"balance factor", func(c *Config) { c.Router.BalanceFactor = 0.9 }, "router.balance_factor: must be ≥ 1, got 0.9"},
		{"move cost", func(c *Config) { c.Router.MoveCost = -1 }, "router.move_cost: must be a finite number ≥ 0, got -1"},
		{"max version lag", func(c *Config) { c.Router.MaxVersionLag = -2 }, "router.max_version_lag: must be ≥ -1, got -2"},
		{"retry after under a second", func(c *Config) { c.Router.RetryAfter = 500 * time.Millisecond }, "router.retry_after: must be whole seconds, at least 1s (the header counts seconds), got 500ms"},
		{"retry after in part seconds", func(c *Config) { c.Router.RetryAfter = 1500 * time.Millisecond }, "router.retry_after: must be whole seconds, at least 1s (the header counts seconds), got 1.5s"},
		{"version rule", func(c *Config) { c.Router.VersionRule = "latest" }, `router.version_rule: "latest" is not one of staleness, newest`},
		{"listen", func(c *Config) { c.Router.Listen = "8000" }, `router.listen: "8000" is not a host:port address`},
		{"nats url", func(c *Config) { c.Bus.NATSURL = "http://x:4222" }, `bus.nats_url: "http://x:4222" is not a nats://, tls://, ws:// or wss:// URL with a host`},
		{"payload", func(c *Config) { c.Bus.MaxPayloadBytes = 128 << 20 }, "bus.max_payload_bytes: must be in [1, 67108864], got 134217728"},
		{"external url", func(c *Config) { c.Engines.ExternalURLs = []string{"10.0.0.1:8000"} },
			`engines.external_urls[0]: "10.0.0.1:8000" is not an http:// or https:// URL with a host`},
		{"external engine url", func(c *Config) {
			c.Engines.External = []ExternalEngine{{URL: "vllm:8000", Kind: EngineVLLM, WeightLoad: LoadDelta}}
		}, `engines.external[0].url: "vllm:8000" is not an http:// or https:// URL with a host`},
		{"external engine kind", func(c *Config) {
			c.Engines.External = []ExternalEngine{{URL: "http://a:8000", Kind: "trt", WeightLoad: LoadDelta}}
		}, `engines.external[0].kind: "trt" is not one of vllm, sglang, builtin: vllm (vllm serve), sglang (python -m sglang.launch_server) or builtin (asyncrl engine)`},
		{"external engine without kind", func(c *Config) {
			c.Engines.External = []ExternalEngine{{URL: "http://a:8000"}}
		}, `engines.external[0].kind: required: say which server it is: vllm (vllm serve), sglang (python -m sglang.launch_server) or builtin (asyncrl engine)`},
		{"external engine weight load", func(c *Config) {
			c.Engines.External = []ExternalEngine{{URL: "http://a:8000", Kind: EngineVLLM, WeightLoad: "deltas"}}
		}, `engines.external[0].weight_load: "deltas" is not one of delta, full, lora: delta (vLLM with asyncrl_vllm's worker extension, builtin), full (any engine that reads the run's directories) or lora; or leave it out for the kind's default`},
		{"external engine duplicate", func(c *Config) {
			c.Engines.External = []ExternalEngine{{URL: "http://a:8000", Kind: EngineVLLM, WeightLoad: LoadFull},
				{URL: "http://a:8000", Kind: EngineVLLM, WeightLoad: LoadFull}}
		}, `engines.external[1].url: http://a:8000 is also external[0]: list each engine once`},
		{"sglang delta", func(c *Config) {
			c.Engines.External = []ExternalEngine{{URL: "http://a:30000", Kind: EngineSGLang, WeightLoad: LoadDelta}}
		}, "engines.external[0].weight_load: SGLang cannot apply asyncrl deltas in place; use full, or leave weight_load out (full is SGLang's default: it loads the checkpoint from disk with /update_weights_from_disk)"},
		{"external model", func(c *Config) {
			c.Engines.External = []ExternalEngine{{URL: "http://a:8000", Kind: EngineVLLM, WeightLoad: LoadFull, Model: "qwen"}}
		}, `engines.external[0].model: "qwen" differs from engines.served_model_name "asyncrl-policy": rollouts send one model name through the router to every engine; set engines.served_model_name: qwen and leave model out`},
		{"external tokenizers", func(c *Config) {
			c.Engines.External = []ExternalEngine{{URL: "http://a:8000", Kind: EngineVLLM, WeightLoad: LoadFull, Tokenizer: "a.json"},
				{URL: "http://b:8000", Kind: EngineVLLM, WeightLoad: LoadFull, Tokenizer: "b.json"}}
		}, `engines.external[1].tokenizer: "b.json" differs from external[0].tokenizer "a.json": every engine of a run serves one model; give every entry the same tokenizer`},
		{"chat without tokenizer", func(c *Config) { c.Rollout.ChatTemplate = true },
			"rollout.chat_template: needs the model's Hugging Face tokenizer directory (with tokenizer_config.json's chat_template or chat_template.jinja): set model.path (its tokenizer files) or engines.external[].tokenizer"},
		{"system prompt without chat", func(c *Config) { c.Rollout.SystemPrompt = "be nice" },
			"rollout.system_prompt: is only used with chat_template: true"},
		{"chat kwargs not an object", func(c *Config) {
			c.Rollout.ChatTemplate = true
			c.Rollout.ChatTemplateKwargs = "[1]"
			c.Engines.External = []ExternalEngine{{URL: "http://a:8000", Kind: EngineVLLM, WeightLoad: LoadFull, Tokenizer: "/models/qwen3"}}
		}, `rollout.chat_template_kwargs: must be a JSON object, e.g. {"enable_thinking": false}: "[1]"`},
		{"cache too small", func(c *Config) { c.Engines.MaxModelLen = 4096; c.Engines.PrefixCacheBlocks = 100 },
			"engines.prefix_cache_blocks: 100 blocks × 16 tokens = 1600 tokens cannot hold one max_model_len (4096) sequence"},
		{"run id", func(c *Config) { c.Run.ID = "a b" }, `run.id: "a b" must be 1–64 characters of A-Z, a-z, 0-9, '-' or '_'`},
		{"zstd", func(c *Config) { c.Publisher.ZstdLevel = 0 }, "publisher.zstd_level: must be in [1, 22], got 0"},
		{"log level", func(c *Config) { c.Log.Level = "trace" }, `log.level: "trace" is not one of debug, info, warn, error`},
		{"metrics listen", func(c *Config) { c.Metrics.Listen = "localhost" }, `metrics.listen: "localhost" is not a host:port address`},
		{"no roles", func(c *Config) { c.Cluster.Roles = nil }, "cluster.roles: must list at least one role"},
		{"two errors", func(c *Config) { c.Run.Steps = 0; c.Log.Format = "xml" },
			"run.steps: must be ≥ 1, got 0\nlog.format: \"xml\" is not one of auto, json, console"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(&c)
			err := c.Validate()
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Validate() = %v\nwant %s", err, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid")
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "ab", 2}, {"kitten", "sitting", 3},
		{"max_stalness_steps", "max_staleness_steps", 1}, {"flaw", "lawn", 2}, {"µs", "us", 1},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"run", "bus", "engines", "router", "trainer", "log"}
	tests := []struct{ in, want string }{
		{"trainr", "trainer"},
		{"Router", "router"},
		{"engine", "engines"},
		{"foo", ""}, // 2 edits from "log": a different word, not a typo
		{"metrics_and_more", ""},
	}
	for _, tt := range tests {
		if got := suggest(tt.in, known); got != tt.want {
			t.Errorf("suggest(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	tests := map[string]string{"2h0m0s": "2h", "1m0s": "1m", "1h30m0s": "1h30m", "1m30s": "1m30s", "1.5s": "1.5s", "0s": "0s", "10m0s": "10m"}
	for in, want := range tests {
		d, err := parseDur(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%s) = %q, want %q", in, got, want)
		}
	}
}

func parseDur(s string) (time.Duration, error) { return time.ParseDuration(s) }
