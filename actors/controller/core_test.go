package controller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/staleness"
	"github.com/asyncrl/asyncrl/messages"
)

// The controller's stories are scenario files (scenario_test.go,
// testdata/); the sampling and resume tests and the scenarios share the
// helpers here.

type seqSource struct{ n, limit int }

func (s *seqSource) Next() (Prompt, bool) {
	if s.limit > 0 && s.n >= s.limit {
		return Prompt{}, false
	}
	s.n++
	return Prompt{ID: fmt.Sprintf("p%d", s.n), Text: "t"}, true
}

func testConfig(b, w, s int64) Config {
	return Config{
		Staleness: staleness.Config{MaxStalenessSteps: s, NumParallelGenerationWorkers: w, MiniBatchSize: b, StalePolicy: staleness.PolicyRequeue},
		RunID:     "r", Sender: "ctl", Task: "reverse", NSamples: 2,
		Subjects: Subjects{Prompts: "P", Train: "T", Capacity: "C", Ledger: "L", Settled: "S"},
	}
}

var t0 = time.Unix(1000, 0)

// sent drains the core and groups its sends by subject.
func sent(c *Core) map[string][]messages.Message {
	out := map[string][]messages.Message{}
	for _, s := range c.Drain().Sends {
		out[s.Subject] = append(out[s.Subject], s.Msg)
	}
	return out
}

// groupReadyMasks builds a finished group with a real token batch: one
// trajectory per reward, every token from version oldest, with the given
// per-trajectory loss masks.
func groupReadyMasks(t *testing.T, groupID, promptID string, oldest int64, masks [][]uint8, rewards ...float64) messages.GroupReady {
	t.Helper()
	tb, err := messages.NewTokenBatch(messages.BatchSpec{Vocab: 98})
	if err != nil {
		t.Fatal(err)
	}
	g := messages.GroupReady{GroupID: groupID, PromptID: promptID, OldestVersion: oldest, Rewards: rewards}
	for i, r := range rewards {
		id := fmt.Sprintf("%s/%d", groupID, i)
		if err := tb.Append(messages.Trajectory{ID: id, GroupID: groupID, Reward: float32(r), PromptLen: 1,
			TokenIDs: []int32{1, 5, 6}, Logprobs: []float32{0, -1, -2}, LossMask: masks[i],
			PolicyVersions: []int32{int32(oldest), int32(oldest), int32(oldest)}}); err != nil {
			t.Fatal(err)
		}
		g.TrajectoryIDs = append(g.TrajectoryIDs, id)
		g.TrainedTokens = append(g.TrainedTokens, messages.TrainedTokens(masks[i]))
	}
	data, err := messages.EncodeTokenBatch(tb)
	if err != nil {
		t.Fatal(err)
	}
	// As the rollout actor packs it: inline here (no trajectory buffer),
	// with the size and checksum a reference carries.
	g.Batch = messages.InlineRef(data)
	g.Tokens = int64(tb.NumTokens())
	return g
}

func assigned(t *testing.T, msgs []messages.Message) []messages.PromptAssigned {
	t.Helper()
	var out []messages.PromptAssigned
	for _, m := range msgs {
		out = append(out, m.(messages.PromptAssigned))
	}
	return out
}

func ledgerStates(msgs []messages.Message) map[messages.LedgerState][]string {
	out := map[messages.LedgerState][]string{}
	for _, m := range msgs {
		l := m.(messages.PromptLedger)
		out[l.State] = append(out[l.State], l.GroupID)
	}
	return out
}

// New's refusals are in testdata/admission.txt; these are the ones a file
// cannot write: the error's class, and a nil source.
func TestConfigErrorsWrapErrInvalidConfig(t *testing.T) {
	cfg := testConfig(2, 4, 1)
	cfg.NSamples = 0
	if _, err := New(cfg, &seqSource{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("err = %v, want ErrInvalidConfig", err)
	}
	if _, err := New(testConfig(2, 4, 1), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil source accepted")
	}
}
