package workload

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

func rng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }

func mustAgentic(t *testing.T, cfg AgenticConfig, seed uint64) []Session {
	t.Helper()
	s, err := Agentic(cfg, rng(seed))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAgenticDeterministicForSeed(t *testing.T) {
	cfg := DefaultAgentic(6)
	a, b := mustAgentic(t, cfg, 7), mustAgentic(t, cfg, 7)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed gave different workloads")
	}
	c := mustAgentic(t, cfg, 8)
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds gave the same workload")
	}
}

func TestAgenticShape(t *testing.T) {
	cfg := DefaultAgentic(12)
	ss := mustAgentic(t, cfg, 3)
	if len(ss) != 12 {
		t.Fatalf("got %d conversations, want 12", len(ss))
	}
	ids := map[string]bool{}
	prefix := ss[0].Segments[0][:cfg.PrefixTokens]
	for i, s := range ss {
		if ids[s.ID] {
			t.Fatalf("duplicate id %q", s.ID)
		}
		ids[s.ID] = true
		if s.Group != i || s.Turns() != 40 || len(s.Generate) != 40 || len(s.Pause) != 40 {
			t.Fatalf("%s: group %d turns %d/%d/%d", s.ID, s.Group, s.Turns(), len(s.Generate), len(s.Pause))
		}
		first := s.Segments[0]
		if !slices.Equal(first[:cfg.PrefixTokens], prefix) {
			t.Fatalf("%s: common prefix differs", s.ID)
		}
		// first = prefix + context (≤ cap) + one user turn.
		ctxPlusUser := len(first) - cfg.PrefixTokens
		if ctxPlusUser < cfg.User.Min || ctxPlusUser > 5000+cfg.User.Max {
			t.Fatalf("%s: first message has %d tokens after the prefix", s.ID, ctxPlusUser)
		}
		for turn := range s.Turns() {
			if turn > 0 {
				if n := len(s.Segments[turn]); n < 120 || n > 160 {
					t.Fatalf("%s turn %d: user turn of %d tokens, want 120–160", s.ID, turn, n)
				}
			}
			if g := s.Generate[turn]; g < 80 || g > 120 {
				t.Fatalf("%s turn %d: assistant %d tokens, want 80–120", s.ID, turn, g)
			}
			if s.Pause[turn] != 0 {
				t.Fatalf("%s turn %d: agentic pause %v, want 0", s.ID, turn, s.Pause[turn])
			}
			for _, id := range s.Segments[turn] {
				if id < 3 || id >= 98 {
					t.Fatalf("%s: token id %d outside [3, 98)", s.ID, id)
				}
			}
		}
	}
	// Contexts differ right after the prefix (otherwise conversations
	// would share more cache than the workload says).
	if slices.Equal(ss[0].Segments[0][cfg.PrefixTokens:cfg.PrefixTokens+32], ss[1].Segments[0][cfg.PrefixTokens:cfg.PrefixTokens+32]) {
		t.Fatal("two conversations share tokens after the common prefix")
	}
}

func TestAgenticLastPromptAboutTwelveAndAHalfK(t *testing.T) {
	// workloads.md: the last turn of a 40-turn conversation is about 12.5k
	// tokens. Average over many conversations.
	ss := mustAgentic(t, DefaultAgentic(200), 11)
	sum := 0
	for i := range ss {
		s := &ss[i]
		sum += s.PlannedTokens() - s.Generate[len(s.Generate)-1]
	}
	mean := float64(sum) / float64(len(ss))
	// 2000 + 1000 + 40·140 + 39·100 = 12,500.
	if math.Abs(mean-12500) > 250 {
		t.Fatalf("mean last prompt %.0f tokens, want ≈ 12,500", mean)
	}
}

func TestLognormalMomentsAndCap(t *testing.T) {
	tests := []struct {
		name       string
		l          Lognormal
		wantMean   float64 // 0: unchecked
		wantMedian float64
		tol        float64 // relative
	}{
		{"context", Lognormal{Mean: 1000, MedianRatio: 0.85, Max: 5000}, 1000, 850, 0.03},
		{"tool latency", Lognormal{Median: 200, MedianRatio: 0.8}, 250, 200, 0.03},
		{"constant", Lognormal{Mean: 42, MedianRatio: 1}, 42, 42, 1e-9},
		{"capped", Lognormal{Mean: 1000, MedianRatio: 0.5, Max: 800}, 0, 500, 0.05},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rng(5)
			xs := make([]float64, 40000)
			sum := 0.0
			for i := range xs {
				xs[i] = tc.l.Draw(r)
				sum += xs[i]
				if tc.l.Max > 0 && xs[i] > tc.l.Max {
					t.Fatalf("draw %v over cap %v", xs[i], tc.l.Max)
				}
			}
			sort.Float64s(xs)
			if med := xs[len(xs)/2]; math.Abs(med-tc.wantMedian) > tc.tol*tc.wantMedian {
				t.Fatalf("median %.2f, want %.2f", med, tc.wantMedian)
			}
			if m := sum / float64(len(xs)); tc.wantMean > 0 && math.Abs(m-tc.wantMean) > tc.tol*tc.wantMean {
				t.Fatalf("mean %.2f, want %.2f", m, tc.wantMean)
			}
		})
	}
}

func TestTranscriptBuildsWholeHistory(t *testing.T) {
	s := Session{
		ID:       "x",
		Segments: [][]int32{{1, 2, 3}, {4}, {5, 6}},
		Generate: []int{2, 1, 3},
		Pause:    []time.Duration{0, time.Second, 2 * time.Second},
	}
	tr := s.Start()
	replies := [][]int32{{10, 11}, {12}, {13, 14, 15}}
	want := [][]int32{{1, 2, 3}, {1, 2, 3, 10, 11, 4}, {1, 2, 3, 10, 11, 4, 12, 5, 6}}
	for turn := 0; ; turn++ {
		p, mt, pause, ok := tr.Next()
		if !ok {
			if turn != 3 {
				t.Fatalf("ended after %d turns, want 3", turn)
			}
			break
		}
		if !slices.Equal(p, want[turn]) || mt != s.Generate[turn] || pause != s.Pause[turn] {
			t.Fatalf("turn %d: prompt %v max %d pause %v", turn, p, mt, pause)
		}
		// A caller appending to the prompt must not corrupt the history.
		_ = append(p, 99)
		tr.Reply(replies[turn])
	}
	if tr.Tokens() != s.PlannedTokens() || s.GeneratedTokens() != 6 {
		t.Fatalf("history %d tokens, planned %d; generated %d", tr.Tokens(), s.PlannedTokens(), s.GeneratedTokens())
	}
}

func TestTranscriptMisusePanics(t *testing.T) {
	s := Session{Segments: [][]int32{{1}}, Generate: []int{1}, Pause: []time.Duration{0}}
	for name, f := range map[string]func(){
		"reply first": func() { s.Start().Reply(nil) },
		"next twice":  func() { tr := s.Start(); tr.Next(); tr.Next() },
		"reply twice": func() { tr := s.Start(); tr.Next(); tr.Reply(nil); tr.Reply(nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

func TestWorkingSetCountsSharedPrefixOnce(t *testing.T) {
	cfg := DefaultAgentic(3)
	ss := mustAgentic(t, cfg, 1)
	total := 0
	for i := range ss {
		total += ss[i].PlannedTokens()
	}
	if got, want := WorkingSet(ss, cfg.PrefixTokens), total-2*cfg.PrefixTokens; got != want {
		t.Fatalf("WorkingSet %d, want %d", got, want)
	}
	g, err := Groups(DefaultGroups(2), rng(4))
	if err != nil {
		t.Fatal(err)
	}
	total = 0
	for i := range g {
		total += g[i].PlannedTokens()
	}
	// Each group's prompt counts once, not once per sample.
	want := total - 7*len(g[0].Segments[0]) - 7*len(g[8].Segments[0])
	if got := WorkingSet(g, 0); got != want {
		t.Fatalf("group WorkingSet %d, want %d", got, want)
	}
	if WorkingSet(nil, 2000) != 0 {
		t.Fatal("empty working set not 0")
	}
}

func TestGroupsShareThePromptWithinAGroupOnly(t *testing.T) {
	cfg := DefaultGroups(5)
	a, err := Groups(cfg, rng(9))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Groups(cfg, rng(9))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed gave different workloads")
	}
	if len(a) != 40 {
		t.Fatalf("%d episodes, want 5×8", len(a))
	}
	ids := map[string]bool{}
	for i, s := range a {
		g, k := i/8, i%8
		if s.Group != g || ids[s.ID] {
			t.Fatalf("episode %d: group %d id %q", i, s.Group, s.ID)
		}
		ids[s.ID] = true
		if !slices.Equal(s.Segments[0], a[g*8].Segments[0]) {
			t.Fatalf("%s: prompt differs from its group's", s.ID)
		}
		if k == 0 && g > 0 && slices.Equal(s.Segments[0][:16], a[(g-1)*8].Segments[0][:16]) {
			t.Fatalf("groups %d and %d share a prompt prefix", g-1, g)
		}
		if n := s.Turns(); n < 10 || n > 40 {
			t.Fatalf("%s: %d turns, want 10–40", s.ID, n)
		}
		if n := len(s.Segments[0]); n < 1000 || n > 2000 {
			t.Fatalf("%s: prompt %d tokens", s.ID, n)
		}
		if s.Pause[0] != 0 {
			t.Fatalf("%s: pause before the first turn", s.ID)
		}
		for turn := 1; turn < s.Turns(); turn++ {
			if n := len(s.Segments[turn]); n < 50 || n > 200 {
				t.Fatalf("%s turn %d: observation %d tokens", s.ID, turn, n)
			}
			if p := s.Pause[turn]; p <= 0 || p > 5*time.Second {
				t.Fatalf("%s turn %d: tool latency %v", s.ID, turn, p)
			}
		}
	}
	// Mutating one sample's prompt must not change its siblings'.
	a[0].Segments[0][0] = -1
	if a[1].Segments[0][0] == -1 {
		t.Fatal("samples alias one prompt slice")
	}
}

func TestGroupsToolLatencyMedian(t *testing.T) {
	cfg := DefaultGroups(40)
	ss, err := Groups(cfg, rng(2))
	if err != nil {
		t.Fatal(err)
	}
	var ps []time.Duration
	for _, s := range ss {
		ps = append(ps, s.Pause[1:]...)
	}
	slices.Sort(ps)
	if med := ps[len(ps)/2]; med < 185*time.Millisecond || med > 215*time.Millisecond {
		t.Fatalf("median tool latency %v over %d draws, want ≈ 200ms", med, len(ps))
	}
}

func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name  string
		mut   func(*AgenticConfig)
		field string
	}{
		{"no conversations", func(c *AgenticConfig) { c.Conversations = 0 }, "Conversations"},
		{"no turns", func(c *AgenticConfig) { c.Turns = 0 }, "Turns"},
		{"user range", func(c *AgenticConfig) { c.User = Uniform{160, 120} }, "User"},
		{"empty reply", func(c *AgenticConfig) { c.Assistant.Min = 0 }, "Assistant.Min"},
		{"ratio", func(c *AgenticConfig) { c.Context.MedianRatio = 1.5 }, "Context.MedianRatio"},
		{"NaN mean", func(c *AgenticConfig) { c.Context.Mean = math.NaN() }, "Context.Mean NaN"},
		{"NaN cap", func(c *AgenticConfig) { c.Context.Max = math.NaN() }, "Context.Max NaN"},
		{"vocab", func(c *AgenticConfig) { c.MinTokenID = 98 }, "MinTokenID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultAgentic(2)
			tc.mut(&c)
			_, err := Agentic(c, rng(1))
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
	g := DefaultGroups(1)
	g.Samples = 0
	if _, err := Groups(g, rng(1)); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Groups with 0 samples: %v", err)
	}
}

func BenchmarkAgentic32x40(b *testing.B) {
	cfg := DefaultAgentic(32)
	for b.Loop() {
		if _, err := Agentic(cfg, rng(1)); err != nil {
			b.Fatal(err)
		}
	}
}
