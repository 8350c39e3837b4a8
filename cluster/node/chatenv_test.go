package node

import (
	"strings"
	"sync"
	"testing"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/pyenv"
	"github.com/asyncrl/asyncrl/internal/realtok"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model/chattemplate"
	"github.com/asyncrl/asyncrl/tasks/openenv/openenvtest"
	"github.com/asyncrl/asyncrl/transport"
)

// chatEnvConfig is a run of the tiny random-initialised Qwen3 with the real
// Qwen3 tokenizer and chat template, trained by the PyTorch worker, its
// episodes from a chat environment.
func chatEnvConfig(t *testing.T, steps int, env config.RolloutEnvConfig, task string, maxTurns int) config.Config {
	t.Helper()
	argv, envv := torchWorker(t)
	cfg := smallConfig(t, steps)
	cfg.Model.Arch, cfg.Model.Preset, cfg.Model.Tokenizer = config.ArchQwen3, "tiny", realtok.Dir(t, realtok.Qwen3)
	cfg.Trainer.Backend, cfg.Trainer.Exec, cfg.Trainer.ExecEnv = config.BackendExec, argv, envv
	cfg.Trainer.LearningRate = 3e-4
	cfg.Rollout.Task = task
	cfg.Rollout.ChatTemplate, cfg.Rollout.ChatTemplateKwargs = true, `{"enable_thinking": false}`
	cfg.Rollout.MaxTokens, cfg.Rollout.MaxTurns = 12, maxTurns
	cfg.Rollout.Env = env
	cfg.Filter.Mode = config.FilterNone // a random model's groups have no variance
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// trajectories collects the rollout's groups' trajectories off the bus:
// the trajectories subject, where the token batches travel (the kept
// GroupReady carries only a reference since batches go by reference);
// with filter mode none every group there is trained.
type trajectories struct {
	mu  sync.Mutex
	all []messages.Trajectory
}

func (c *trajectories) on(m *transport.Msg) {
	msg, err := messages.Decode(m.Data)
	if err != nil {
		return
	}
	gr, ok := msg.(messages.GroupReady)
	if !ok || len(gr.Batch.Inline) == 0 {
		return
	}
	tb, err := messages.DecodeTokenBatch(gr.Batch.Inline)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range tb.Len() {
		if tr, err := tb.Trajectory(i); err == nil {
			c.all = append(c.all, tr)
		}
	}
}

func collect(t *testing.T, into *trajectories) func(*Node) {
	return func(n *Node) {
		sub, err := n.Bus().Subscribe(n.subj.Trajectories, into.on)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
}

// checkChatTrajectories: every trajectory is the real Qwen3 template's
// rendering (its prompt is the template's tools preamble and the
// environment's opening messages with the generation prompt) and its loss
// mask is 1 only on tokens of assistant turns: each masked run starts
// right after a generation prompt and none covers a context token.
func checkChatTrajectories(t *testing.T, got *trajectories, opening string) {
	t.Helper()
	tok, err := chattemplate.LoadDir(realtok.Dir(t, realtok.Qwen3))
	if err != nil {
		t.Fatal(err)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	if len(got.all) == 0 {
		t.Fatal("no trajectory seen on the bus")
	}
	const gen = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
	opening = "<|im_start|>system\n" + opening
	for _, tr := range got.all {
		prompt := tok.Decode(tr.TokenIDs[:tr.PromptLen])
		if !strings.HasPrefix(prompt, opening) || !strings.HasSuffix(prompt, gen) {
			t.Fatalf("trajectory %s prompt is not the template's: %q", tr.ID, prompt)
		}
		for i, m := range tr.LossMask {
			if m == 1 && (i == 0 || tr.LossMask[i-1] == 0) && !strings.HasSuffix(tok.Decode(tr.TokenIDs[:i]), gen) {
				t.Fatalf("trajectory %s: a loss-masked run starts at %d after %q, not after a generation prompt", tr.ID, i, tok.Decode(tr.TokenIDs[max(0, i-12):i]))
			}
		}
	}
}

// TestRunSkyRLGymEnv: `asyncrl run` with the tiny real-model checkpoint
// and its real chat template, its episodes from a SkyRL-Gym-style
// BaseTextEnv (integrations/envs/tests/skyrl_calc_env.py) served by the
// Python adapter (rollout.env.protocol chat_http): every step trains, the
// trajectories are the template's rendering of the env's messages with
// assistant-only loss masks, nothing is lost, no environment failure.
func TestRunSkyRLGymEnv(t *testing.T) {
	base, _ := pyenv.Start(t, "skyrl_calc_env:SPEC")
	env := config.DefaultRolloutEnv()
	env.Protocol, env.URLs = config.EnvChatHTTP, []string{base}
	cfg := chatEnvConfig(t, 2, env, "skyrl_calc", 0)
	got := &trajectories{}
	n, s := runNode(t, cfg, collect(t, got))
	checkRanAllSteps(t, s, 2)
	checkLedger(t, n, s)
	if s.TrajectoriesFinished == 0 || s.TrajectoriesAbortedEnvError+s.TrajectoriesAbortedEnvTimeout != 0 {
		t.Fatalf("finished %d, env failures %d+%d", s.TrajectoriesFinished, s.TrajectoriesAbortedEnvError, s.TrajectoriesAbortedEnvTimeout)
	}
	checkChatTrajectories(t, got, "Use the calc tool, then answer.\n\n# Tools\n")
}

// TestRunOpenEnv: the same with an OpenEnv-style server pool
// (openenvtest: OpenEnv's reset/step/state/health wire form, one episode
// per server at a time; rollout.env.protocol openenv).
func TestRunOpenEnv(t *testing.T) {
	var urls []string
	for range 4 {
		srv := openenvtest.New()
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	env := config.DefaultRolloutEnv()
	env.Protocol, env.URLs, env.ObservationField = config.EnvOpenEnv, urls, "echoed_message"
	cfg := chatEnvConfig(t, 2, env, "echo", 2)
	cfg.Rollout.SystemPrompt = "Answer with a number."
	got := &trajectories{}
	n, s := runNode(t, cfg, collect(t, got))
	checkRanAllSteps(t, s, 2)
	checkLedger(t, n, s)
	if s.TrajectoriesFinished == 0 || s.TrajectoriesAbortedEnvError+s.TrajectoriesAbortedEnvTimeout != 0 {
		t.Fatalf("finished %d, env failures %d+%d", s.TrajectoriesFinished, s.TrajectoriesAbortedEnvError, s.TrajectoriesAbortedEnvTimeout)
	}
	checkChatTrajectories(t, got, "Answer with a number.<|im_end|>\n<|im_start|>user\nSay a number.<|im_end|>\n")
}
