package engine

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/messages/vllmwire"
)

// routesHash is a HashModel that also reports routes: the experts of
// position p depend on tokens[p], p and the layer, so a row at the wrong
// position or from the wrong token shows.
type routesHash struct{ *HashModel }

func (routesHash) RouteShape() (int, int, int) { return 2, 2, 8 }

func (routesHash) Routes(tokens []int32, from int) []int32 {
	out := make([]int32, 0, (len(tokens)-from)*4)
	for p := from; p < len(tokens); p++ {
		for l := range 2 {
			for k := range 2 {
				out = append(out, (tokens[p]+int32(3*p+5*l+k))%8)
			}
		}
	}
	return out
}

func newRoutesHarness(t *testing.T) *harness {
	t.Helper()
	m := routesHash{NewHashModel(1)}
	e, err := New(testConfig(), m)
	if err != nil {
		t.Fatal(err)
	}
	srv := newTestServer(t, e)
	t.Cleanup(e.Close)
	return &harness{t: t, e: e, srv: srv, m: m.HashModel}
}

func TestCompletionRoutedExperts(t *testing.T) {
	h := newRoutesHarness(t)
	prompt := []int32{5, 6, 7, 8, 9}
	for _, start := range []int{0, 3, 4} {
		r := h.complete(map[string]any{"prompt": prompt, "max_tokens": 4, "ignore_eos": true, "return_token_ids": true,
			"return_routed_experts": true, "routed_experts_prompt_start": start})
		ch := r.Choices[0]
		if ch.RoutedExperts == nil {
			t.Fatalf("start %d: no routed_experts", start)
		}
		rows, err := vllmwire.DecodeRoutedExperts(*ch.RoutedExperts, 8, 2, 2)
		if err != nil {
			t.Fatal(err)
		}
		// vLLM's rule: positions [start, prompt + generated − 1).
		all := append(slices.Clone(prompt), ch.TokenIDs...)
		if want := len(all) - 1 - start; rows.Tokens != want {
			t.Fatalf("start %d: %d rows, want %d", start, rows.Tokens, want)
		}
		want := routesHash{}.Routes(all[:len(all)-1], start)
		if !slices.Equal(rows.Values, want) {
			t.Fatalf("start %d: rows %v, want %v", start, rows.Values, want)
		}
	}
	// Without the flag the field is absent.
	r := h.complete(map[string]any{"prompt": prompt, "max_tokens": 2})
	if r.Choices[0].RoutedExperts != nil {
		t.Fatal("routed_experts without return_routed_experts")
	}
}

func TestCompletionRoutedExpertsErrors(t *testing.T) {
	h := newRoutesHarness(t)
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"prompt": []int32{1, 2}, "return_routed_experts": true, "routed_experts_prompt_start": 2}, "must be below the 2 tokens"},
		{map[string]any{"prompt": []int32{1, 2}, "routed_experts_prompt_start": -1}, ">= 0"},
		{map[string]any{"prompt": []int32{1, 2}, "return_routed_experts": true, "stream": true}, "non-streamed"},
	} {
		code, _, body := h.post("/v1/completions", c.body)
		if code != http.StatusBadRequest || !strings.Contains(errorBody(t, body).Message, c.want) {
			t.Fatalf("%v: %d %s, want 400 with %q", c.body, code, body, c.want)
		}
	}
	plain := newHarness(t, testConfig()) // HashModel reports no routes
	code, _, body := plain.post("/v1/completions", map[string]any{"prompt": []int32{1, 2}, "return_routed_experts": true})
	if code != http.StatusBadRequest || !strings.Contains(errorBody(t, body).Message, "does not report routed experts") {
		t.Fatalf("model without routes: %d %s", code, body)
	}
}
