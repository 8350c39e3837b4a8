package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
)

// A vLLM answer with routed_experts (base64 .npy, 7 rows for 5 prompt + 3
// generated tokens) and processed top logprobs; its README cites vLLM's
// completion/protocol.py and serving.py.
const routedFixture = "../../messages/vllmwire/testdata/vllm_completion_routed_uint8.json"

func TestHTTPClientDecodesVLLMRoutesAndSupport(t *testing.T) {
	body, err := os.ReadFile(routedFixture)
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Values []int32 `json:"values"`
	}
	exp, _ := os.ReadFile("../../messages/vllmwire/testdata/vllm_completion_routed_uint8.expect.json")
	if err := json.Unmarshal(exp, &want); err != nil {
		t.Fatal(err)
	}
	f := newFakeVLLM(t, body, routerHeaders)
	c := &HTTPClient{BaseURL: f.srv.URL, SupportFromLogprobs: 3}
	req := TurnRequest{SessionID: "s", Tokens: []int32{1, 2, 3, 4, 5}, MaxTokens: 3, Temperature: 1, TopP: 0.9, TopK: -1,
		Routes: RouteSpec{Layers: 2, TopK: 2, NumExperts: 8}}
	out, err := c.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.field(t, "return_routed_experts"); got != "true" {
		t.Fatalf("return_routed_experts = %s", got)
	}
	if _, ok := f.last["routed_experts_prompt_start"]; ok {
		t.Fatal("start 0 sent (vLLM's default; left out)")
	}
	if got := f.field(t, "logprobs"); got != "3" {
		t.Fatalf("logprobs = %s, want 3 rows for the support sets", got)
	}
	if !slices.Equal(out.Routes, want.Values) {
		t.Fatalf("routes %v, want %v", out.Routes, want.Values)
	}
	wantSup := [][]int32{{11, 20, -1}, {12, 20, 22}, {30, 13, 31}}
	if !slices.EqualFunc(out.Support, wantSup, slices.Equal) || len(out.SupportLogprobs) != 3 {
		t.Fatalf("support %v (logprobs %v), want %v", out.Support, out.SupportLogprobs, wantSup)
	}
	// A start is sent when rows are held. 7 rows for a 5+3-token call
	// from position 2 are the rows of every position from 0: an engine
	// that dropped routed_experts_prompt_start (vLLM before PR #51906).
	// The client keeps those from position 2 on instead of failing the
	// turn (and every later one).
	req.RoutesStart = 2
	sliced, err := c.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("an engine that ignored the prompt start: %v", err)
	}
	if got := f.field(t, "routed_experts_prompt_start"); got != "2" {
		t.Fatalf("routed_experts_prompt_start = %s", got)
	}
	if stride := 2 * 2; !sliced.RoutesSliced || !slices.Equal(sliced.Routes, want.Values[2*stride:]) {
		t.Fatalf("sliced %v: routes %v, want the rows of positions 2..6 %v", sliced.RoutesSliced, sliced.Routes, want.Values[2*stride:])
	}
	// A row count that is neither the asked range nor the whole context
	// still fails the call: 7 rows from position 2 of a 4+3-token call.
	req.Tokens = []int32{1, 2, 3, 4}
	if _, err := c.Generate(context.Background(), req); !errors.Is(err, ErrEngine) {
		t.Fatalf("7 rows from position 2 of a 4+3-token call: err %v, want ErrEngine", err)
	}
	req.Tokens = []int32{1, 2, 3, 4, 5}
	req.RoutesStart, req.Routes.Layers = 0, 3
	if _, err := c.Generate(context.Background(), req); !errors.Is(err, ErrEngine) {
		t.Fatalf("wrong layer count: err %v, want ErrEngine", err)
	}
	// An engine that does not return routes (vLLM without
	// --enable-return-routed-experts) fails the call instead of leaving
	// padding rows under trained tokens.
	f.body = vllmFixture(t)
	req.Routes.Layers, req.Tokens = 2, fixturePrompt
	if _, err := c.Generate(context.Background(), req); !errors.Is(err, ErrEngine) || !strings.Contains(err.Error(), "no routed_experts") {
		t.Fatalf("answer without routes: err %v", err)
	}
	defaultClient.CloseIdleConnections()
}

// routeOf is a fake MoE routing: position p's experts depend on p and
// tokens[p] (so a row at the wrong position shows).
func routeOf(tokens []int32, p int, rs RouteSpec) []int32 {
	out := make([]int32, 0, rs.Layers*rs.TopK)
	for l := range rs.Layers {
		for k := range rs.TopK {
			out = append(out, (tokens[p]*7+int32(p*3+l*5+k))%int32(rs.NumExperts))
		}
	}
	return out
}

// routingGen plays vLLM's routed-experts rule over scripted outputs: a
// call with prompt P from start C generating G tokens answers the rows of
// positions [C, P+G−1).
type routingGen struct {
	scripted
	rs     RouteSpec
	mu     sync.Mutex
	starts []int
	rows   [][]int32
}

func (g *routingGen) Generate(ctx context.Context, req TurnRequest) (TurnOutput, error) {
	out, err := g.scripted.Generate(ctx, req)
	if err != nil {
		return out, err
	}
	all := append(slices.Clone(req.Tokens), out.Tokens...)
	var rows []int32
	for p := req.RoutesStart; p < len(all)-1; p++ {
		rows = append(rows, routeOf(all, p, g.rs)...)
	}
	g.mu.Lock()
	g.starts, g.rows = append(g.starts, req.RoutesStart), append(g.rows, rows)
	g.mu.Unlock()
	out.Routes = rows
	return out, nil
}

func TestMultiTurnRoutesAreTheTurnsRowsConcatenated(t *testing.T) {
	rs := RouteSpec{Layers: 2, TopK: 2, NumExperts: 16}
	// Turn 1 is aborted after "1" and continued; then two more turns.
	gen := &routingGen{rs: rs, scripted: scripted{outs: []TurnOutput{text("1", false, 0, "abort"), text("0", true, 0, "stop"),
		text("5", true, 1, "stop"), text("15", true, 1, "stop")}}}
	cfg := testCfg()
	cfg.MaxTurns, cfg.Routes = 3, rs
	task := mustTask(t, "guess")
	ep, err := RunEpisode(context.Background(), gen, task, task.Sample(seeded()), "g/1", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Turns < 2 || len(gen.calls) < 3 {
		t.Fatalf("want a multi-turn episode with a continued call, got %d turns, %d calls", ep.Turns, len(gen.calls))
	}
	stride := rs.Layers * rs.TopK
	var concat []int32
	for i, rows := range gen.rows {
		// Each call asks only for the rows the trajectory lacks.
		if gen.starts[i] != len(concat)/stride {
			t.Fatalf("call %d: routed_experts_prompt_start %d, want the %d rows held", i, gen.starts[i], len(concat)/stride)
		}
		concat = append(concat, rows...)
	}
	n, held := len(ep.Tokens), len(concat)/stride
	if len(ep.Routes) != n*stride || ep.RoutesPadded != n-held {
		t.Fatalf("%d route values (%d padded rows) for %d tokens, %d rows from the engine", len(ep.Routes), ep.RoutesPadded, n, held)
	}
	if !slices.Equal(ep.Routes[:len(concat)], concat) {
		t.Fatalf("episode routes are not the concatenation of the %d calls' rows", len(gen.rows))
	}
	for p := range held { // and each row is its own position's routing
		if !slices.Equal(ep.Routes[p*stride:(p+1)*stride], routeOf(ep.Tokens, p, rs)) {
			t.Fatalf("row %d is not position %d's routing", p, p)
		}
	}
	checkPadding(t, ep, held, stride, rs.TopK)
}

// checkPadding: rows from held on are arange(top_k) per layer, and no
// trained token's logprob depends on them (the output of padded position p
// predicts token p+1, which must be loss-inactive or absent).
func checkPadding(t *testing.T, ep Episode, held, stride, topK int) {
	t.Helper()
	n := len(ep.Tokens)
	if held == n {
		t.Fatal("no padded row: the last token is never forwarded")
	}
	for p := held; p < n; p++ {
		for j, v := range ep.Routes[p*stride : (p+1)*stride] {
			if v != int32(j%topK) {
				t.Fatalf("padded row %d = %v, want arange(top_k) per layer", p, ep.Routes[p*stride:(p+1)*stride])
			}
		}
		if p+1 < n && ep.LossMask[p+1] == 1 {
			t.Fatalf("padded position %d feeds trained token %d", p, p+1)
		}
	}
}

// moeHash is the built-in engine's HashModel with routeOf as its routing.
type moeHash struct {
	*engine.HashModel
	rs RouteSpec
}

func (m moeHash) RouteShape() (int, int, int) { return m.rs.Layers, m.rs.TopK, m.rs.NumExperts }

func (m moeHash) Routes(tokens []int32, from int) []int32 {
	var out []int32
	for p := from; p < len(tokens); p++ {
		out = append(out, routeOf(tokens, p, m.rs)...)
	}
	return out
}

// routesModel is an engine model that reports routes (engine.RoutesModel).
type routesModel interface {
	engine.Model
	RouteShape() (int, int, int)
	Routes(tokens []int32, from int) []int32
}

// TestRoutesEndToEndBuiltinEngine: a multi-turn episode against the
// built-in engine over HTTP, packed into the Arrow token batch: the routes
// column equals the served model's routing of every position the engine
// ran. Two models: a hash stand-in with 300 experts (uint16 on the wire,
// an int16 column) and the built-in policy as a mixture of experts
// (helper B's model.Model routing; uint8).
func TestRoutesEndToEndBuiltinEngine(t *testing.T) {
	pcfg := model.DefaultConfig()
	pcfg.Experts, pcfg.TopK = 4, 2
	moe, err := model.New(pcfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []routesModel{moeHash{engine.NewHashModel(3), RouteSpec{Layers: 3, TopK: 2, NumExperts: 300}}, moe} {
		l, k, x := m.RouteShape()
		rs := RouteSpec{Layers: l, TopK: k, NumExperts: x}
		t.Run(fmt.Sprintf("%d-experts", x), func(t *testing.T) { routesEndToEnd(t, m, rs) })
	}
}

func routesEndToEnd(t *testing.T, m routesModel, rs RouteSpec) {
	ecfg := engine.DefaultConfig()
	ecfg.TimeScale = 0
	e, err := engine.New(ecfg, m)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	defer func() { srv.Close(); e.Close(); defaultClient.CloseIdleConnections() }()
	cfg := testCfg()
	cfg.MaxTurns, cfg.MaxTokens, cfg.Routes = 3, 4, rs
	task := mustTask(t, "guess")
	ep, err := RunEpisode(context.Background(), &HTTPClient{BaseURL: srv.URL}, task, task.Sample(seeded()), "g/0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := &Actor{cfg: Config{RunID: "r", Name: "ro", Episode: cfg}}
	gr, err := a.pack(messages.PromptAssigned{GroupID: "g", PromptID: "p"}, []result{{ep: ep}})
	if err != nil {
		t.Fatal(err)
	}
	tb, err := messages.DecodeTokenBatch(gr.Batch.Inline)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tb.Trajectory(0)
	if err != nil {
		t.Fatal(err)
	}
	if tb.Routes == nil || tb.Routes.DType != messages.ExpertDTypeFor(int32(rs.NumExperts)) {
		t.Fatalf("routes column %+v for %d experts", tb.Routes, rs.NumExperts)
	}
	n, stride := len(tr.TokenIDs), rs.Layers*rs.TopK
	held := n - ep.RoutesPadded
	want := m.Routes(tr.TokenIDs[:held], 0)
	if ep.Turns < 2 || held < ep.PromptLen || !slices.Equal(tr.Routes[:held*stride], want) || !slices.Equal(tr.Routes, ep.Routes) {
		t.Fatalf("%d turns; packed routes (%d values, %d tokens × %d, %d held) differ from the engine's routing", ep.Turns, len(tr.Routes), n, stride, held)
	}
	checkPadding(t, ep, held, stride, rs.TopK)
	if pm, ok := m.(*model.Model); ok {
		trainerReplays(t, pm, tr, cfg.Temperature, stride)
	}
}

// trainerReplays: the built-in trainer replaying the packed routes
// computes the engine's logprobs of every generated token of the
// multi-turn trajectory (same weights), and routes one row off do not —
// so the rows line up with the positions they route.
func trainerReplays(t *testing.T, m *model.Model, tr messages.Trajectory, temp float64, stride int) {
	t.Helper()
	tc := model.DefaultTrainerConfig()
	tc.Temperature = temp
	trn, err := model.NewTrainer(m, tc)
	if err != nil {
		t.Fatal(err)
	}
	seq := model.Sequence{Tokens: tr.TokenIDs, LossMask: tr.LossMask, RolloutLogprobs: tr.Logprobs, Routes: tr.Routes}
	lps, err := trn.Logprobs(model.Batch{Sequences: []model.Sequence{seq}})
	if err != nil {
		t.Fatal(err)
	}
	for i, mk := range tr.LossMask {
		if mk == 1 && math.Abs(float64(lps[0][i]-tr.Logprobs[i])) > 1e-4 {
			t.Fatalf("token %d: trainer logprob %v, engine %v", i, lps[0][i], tr.Logprobs[i])
		}
	}
	seq.Routes = append(slices.Clone(tr.Routes[stride:]), tr.Routes[:stride]...) // rows shifted by one
	off, err := trn.Logprobs(model.Batch{Sequences: []model.Sequence{seq}})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(off[0], lps[0]) {
		t.Fatal("routes shifted by one row give the same logprobs: the trainer did not replay them")
	}
}
