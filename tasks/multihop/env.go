package multihop

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
)

// Config configures a multihop task.
type Config struct {
	Name string
	// Seed and Sizes generate the corpus (NewCorpus).
	Seed  uint64
	Sizes Sizes
	// MaxTurns bounds an episode (tool calls + the answer);
	// MaxTokensPerTurn a turn. SearchResults is how many titles a search
	// returns.
	MaxTurns, MaxTokensPerTurn, SearchResults int
	// System is the opening system message ("" for none).
	System string
}

// DefaultConfig is "multihop": the corpus of seed 1 at DefaultSizes, 6
// turns of up to 64 tokens, 3 search results.
func DefaultConfig() Config {
	return Config{Name: "multihop", Seed: 1, Sizes: DefaultSizes(), MaxTurns: 6, MaxTokensPerTurn: 64, SearchResults: 3,
		System: "Answer the question using the search and lookup tools. Reply with the answer only."}
}

// Tools are the search and lookup tools (the OpenAI tools shape).
var Tools = json.RawMessage(`[{"type": "function", "function": {"name": "search", "description": "Find documents: returns the titles that best match the query.", "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "words to look for"}}, "required": ["query"]}}}, {"type": "function", "function": {"name": "lookup", "description": "Read the document with this exact title.", "parameters": {"type": "object", "properties": {"title": {"type": "string", "description": "a document title, e.g. from search"}}, "required": ["title"]}}}]`)

// Task is the multihop chat environment (a chatenv.Task and a
// chatenv.Demonstrator).
type Task struct {
	cfg    Config
	corpus *Corpus
}

var (
	_ chatenv.Task         = (*Task)(nil)
	_ chatenv.Demonstrator = (*Task)(nil)
)

// New validates cfg and generates its corpus.
func New(cfg Config) (*Task, error) {
	if cfg.Name == "" || cfg.MaxTurns < 1 || cfg.MaxTokensPerTurn < 1 || cfg.SearchResults < 1 {
		return nil, fmt.Errorf("multihop: config %+v: want a name and positive limits", cfg)
	}
	c, err := NewCorpus(cfg.Seed, cfg.Sizes)
	if err != nil {
		return nil, err
	}
	return &Task{cfg: cfg, corpus: c}, nil
}

func init() {
	t, err := New(DefaultConfig())
	if err == nil {
		err = tasks.Register(t)
	}
	if err != nil {
		panic(err)
	}
}

// Corpus is the task's generated corpus.
func (t *Task) Corpus() *Corpus { return t.corpus }

// Name implements tasks.Task.
func (t *Task) Name() string { return t.cfg.Name }

// MaxTurns implements tasks.Task.
func (t *Task) MaxTurns() int { return t.cfg.MaxTurns }

// MaxTokensPerTurn implements tasks.Task.
func (t *Task) MaxTokensPerTurn() int { return t.cfg.MaxTokensPerTurn }

// Sample draws a question: the prompt's Seed is its index, its Text the
// question.
func (t *Task) Sample(rng *rand.Rand) tasks.Prompt {
	i := rng.IntN(len(t.corpus.Questions))
	return tasks.Prompt{ID: t.cfg.Name + "-" + strconv.Itoa(i), Text: t.corpus.Questions[i].Text, Seed: int64(i)}
}

// NewEnv is the text-level view (chatenv.TextEnv, Hermes calls).
func (t *Task) NewEnv() tasks.Env {
	return chatenv.TextEnv(t.NewChatEnv(), chatenv.ToolsHermes, time.Minute)
}

// NewChatEnv starts an episode.
func (t *Task) NewChatEnv() chatenv.Env { return &env{t: t} }

type env struct {
	t    *Task
	q    *Question
	done bool
}

// Reset opens the episode of the prompt's question (Seed is its index; a
// Text, when given, must be that question).
func (e *env) Reset(_ context.Context, p tasks.Prompt) (chatenv.Start, error) {
	qs := e.t.corpus.Questions
	if p.Seed < 0 || p.Seed >= int64(len(qs)) {
		return chatenv.Start{}, fmt.Errorf("%w: %s: seed %d is not a question index (0..%d)", tasks.ErrBadPrompt, p.ID, p.Seed, len(qs)-1)
	}
	q := &qs[p.Seed]
	if p.Text != "" && p.Text != q.Text {
		return chatenv.Start{}, fmt.Errorf("%w: %s: text %q is not question %d (%q)", tasks.ErrBadPrompt, p.ID, p.Text, p.Seed, q.Text)
	}
	e.q, e.done = q, false
	var msgs []chatenv.Message
	if e.t.cfg.System != "" {
		msgs = append(msgs, chatenv.Message{Role: "system", Content: e.t.cfg.System})
	}
	return chatenv.Start{Messages: append(msgs, chatenv.Message{Role: "user", Content: q.Text}), Tools: Tools}, nil
}

// Step answers each tool call with a tool message, or scores the final
// answer (a turn without calls) and ends the episode.
func (e *env) Step(_ context.Context, a chatenv.Action) (chatenv.Result, error) {
	switch {
	case e.q == nil:
		return chatenv.Result{}, tasks.ErrNotReset
	case e.done:
		return chatenv.Result{}, tasks.ErrEpisodeDone
	}
	if len(a.Message.ToolCalls) == 0 {
		e.done = true
		return chatenv.Result{Reward: Verify(a.Message.Content, e.q.Answer), Done: true}, nil
	}
	out := make([]chatenv.Message, 0, len(a.Message.ToolCalls))
	for _, call := range a.Message.ToolCalls {
		out = append(out, chatenv.Message{Role: "tool", ToolCallID: call.ID, Name: call.Function.Name, Content: e.t.call(call)})
	}
	return chatenv.Result{Messages: out}, nil
}

func (e *env) Close(context.Context) error { return nil }

// call runs one tool call; a bad one is answered with an error for the
// model (never an error of the environment).
func (t *Task) call(call chatenv.ToolCall) string {
	var args map[string]any
	_ = json.Unmarshal(call.Function.Arguments, &args)
	arg := func(k string) (string, bool) { s, ok := args[k].(string); return s, ok }
	switch call.Function.Name {
	case "search":
		q, ok := arg("query")
		if !ok {
			return `error: search takes {"query": "<words>"}`
		}
		hits := t.corpus.Search(q, t.cfg.SearchResults)
		if len(hits) == 0 {
			return "no results"
		}
		return strings.Join(hits, "\n")
	case "lookup":
		title, ok := arg("title")
		if !ok {
			return `error: lookup takes {"title": "<document title>"}`
		}
		d, found := t.corpus.Lookup(title)
		if !found {
			return fmt.Sprintf("error: no document titled %q; search for it first", title)
		}
		return d.Text
	default:
		return fmt.Sprintf("error: unknown tool %q (the tools are search and lookup)", call.Function.Name)
	}
}

// Verify is the verifier: 1 when the answer equals want, ignoring case,
// surrounding space and quotes, a final period and an empty think block
// before it (what Qwen3's template writes into a final turn); else 0.
func Verify(answer, want string) float64 {
	norm := func(s string) string {
		s = strings.TrimSpace(s)
		if rest, ok := strings.CutPrefix(s, "<think>"); ok {
			if _, after, closed := strings.Cut(rest, "</think>"); closed {
				s = strings.TrimSpace(after)
			}
		}
		s = strings.TrimSuffix(s, ".")
		return strings.ToLower(strings.Trim(strings.TrimSpace(s), `"'`))
	}
	if norm(answer) == norm(want) && norm(want) != "" {
		return 1
	}
	return 0
}
