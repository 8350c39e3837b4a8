package multihop

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
)

// TestCorpusTwoHops: the corpus is a function of its seed, and every
// question needs both of its documents: the first names the second but
// not the answer, the second holds the answer, and the question names
// neither the second document nor the answer. Searching a question's
// subject finds its document first.
func TestCorpusTwoHops(t *testing.T) {
	a, err := NewCorpus(1, DefaultSizes())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewCorpus(1, DefaultSizes())
	if !reflect.DeepEqual(a.Docs, b.Docs) || !reflect.DeepEqual(a.Questions, b.Questions) {
		t.Fatal("the same seed gave two corpora")
	}
	if c, _ := NewCorpus(2, DefaultSizes()); reflect.DeepEqual(a.Docs, c.Docs) {
		t.Fatal("seeds 1 and 2 gave the same corpus")
	}
	s := DefaultSizes()
	if len(a.Docs) != s.People+s.Cities+s.Countries+s.Companies || len(a.Questions) != 2*s.People {
		t.Fatalf("%d docs, %d questions", len(a.Docs), len(a.Questions))
	}
	for _, q := range a.Questions {
		first, ok1 := a.Lookup(q.Hops[0])
		second, ok2 := a.Lookup(strings.ToUpper(q.Hops[1]))
		if !ok1 || !ok2 {
			t.Fatalf("%q: hops %q not in the corpus", q.Text, q.Hops)
		}
		if !strings.Contains(first.Text, q.Hops[1]) || strings.Contains(first.Text, q.Answer) {
			t.Errorf("%q: the first document %q must name %q and not the answer %q", q.Text, first.Text, q.Hops[1], q.Answer)
		}
		if !strings.Contains(second.Text, q.Answer) {
			t.Errorf("%q: the second document %q does not hold the answer %q", q.Text, second.Text, q.Answer)
		}
		if strings.Contains(q.Text, q.Hops[1]) || strings.Contains(q.Text, q.Answer) {
			t.Errorf("%q gives away a hop", q.Text)
		}
		if hits := a.Search(q.Hops[0], 3); len(hits) == 0 || hits[0] != q.Hops[0] {
			t.Errorf("search %q: %q, want it first", q.Hops[0], hits)
		}
	}
	if _, err := NewCorpus(1, Sizes{People: 1}); err == nil {
		t.Error("a corpus without cities was accepted")
	}
}

func lookupCall(id, title string) chatenv.ToolCall {
	args, _ := json.Marshal(map[string]string{"title": title})
	return chatenv.ToolCall{ID: id, Type: "function", Function: chatenv.FunctionCall{Name: "lookup", Arguments: args}}
}

// TestEpisode: an episode through the contract — a lookup chain is
// answered with the documents, bad calls with error messages (not errors
// of the environment), the right answer scores 1 and a wrong one 0; a
// prompt that is not its question is refused, and a step after the end
// too.
func TestEpisode(t *testing.T) {
	task, err := tasks.Get("multihop")
	if err != nil {
		t.Fatal(err)
	}
	mh := task.(*Task)
	p := task.Sample(rand.New(rand.NewPCG(1, 2)))
	q := mh.Corpus().Questions[p.Seed]
	ctx := context.Background()
	for _, c := range []struct {
		answer string
		reward float64
	}{{q.Answer, 1}, {" " + strings.ToLower(q.Answer) + ".", 1}, {"<think>\n\n</think>\n\n" + q.Answer, 1}, {q.Hops[1], 0}, {"", 0}} {
		env := mh.NewChatEnv()
		start, err := env.Reset(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if last := start.Messages[len(start.Messages)-1]; last.Content != q.Text || string(start.Tools) != string(Tools) {
			t.Fatalf("start %+v", start)
		}
		steps := []chatenv.Message{
			{Role: "assistant", ToolCalls: []chatenv.ToolCall{lookupCall("call_0", q.Hops[0]), lookupCall("call_1", "Nowhere Atall"),
				{ID: "call_2", Function: chatenv.FunctionCall{Name: "search", Arguments: json.RawMessage(`{"q": 1}`)}},
				{ID: "call_3", Function: chatenv.FunctionCall{Name: "rm", Arguments: json.RawMessage(`{}`)}}}},
			{Role: "assistant", ToolCalls: []chatenv.ToolCall{lookupCall("call_0", q.Hops[1])}},
		}
		res, err := env.Step(ctx, chatenv.Action{Message: steps[0]})
		if err != nil || len(res.Messages) != 4 || res.Done {
			t.Fatalf("step 1: %+v %v", res, err)
		}
		first, _ := mh.Corpus().Lookup(q.Hops[0])
		if res.Messages[0].Content != first.Text || res.Messages[0].ToolCallID != "call_0" {
			t.Errorf("lookup answered %+v", res.Messages[0])
		}
		for i, want := range []string{"error: no document titled", "error: search takes", "error: unknown tool"} {
			if !strings.HasPrefix(res.Messages[i+1].Content, want) {
				t.Errorf("bad call %d answered %q, want %q", i+1, res.Messages[i+1].Content, want)
			}
		}
		if res, err = env.Step(ctx, chatenv.Action{Message: steps[1]}); err != nil || !strings.Contains(res.Messages[0].Content, q.Answer) {
			t.Fatalf("step 2: %+v %v", res, err)
		}
		res, err = env.Step(ctx, chatenv.Action{Message: chatenv.Message{Role: "assistant", Content: c.answer}})
		if err != nil || !res.Done || res.Reward != c.reward {
			t.Errorf("answer %q: %+v %v, want reward %v", c.answer, res, err, c.reward)
		}
		if _, err := env.Step(ctx, chatenv.Action{Message: chatenv.Message{Content: "again"}}); !errors.Is(err, tasks.ErrEpisodeDone) {
			t.Errorf("a step after the end: %v", err)
		}
	}
	bad := p
	bad.Text = "What is 2+2?"
	if _, err := mh.NewChatEnv().Reset(ctx, bad); !errors.Is(err, tasks.ErrBadPrompt) {
		t.Errorf("a foreign prompt: %v", err)
	}
	bad.Seed = int64(len(mh.Corpus().Questions))
	if _, err := mh.NewChatEnv().Reset(ctx, bad); !errors.Is(err, tasks.ErrBadPrompt) {
		t.Errorf("an out-of-range seed: %v", err)
	}
}

// TestDemonstrations: the demonstrations step the real environment with
// well-formed calls only (no tool answers an error), end on an answer, and
// score 1 except for the demoWrong share.
func TestDemonstrations(t *testing.T) {
	task, _ := tasks.Get("multihop")
	mh := task.(*Task)
	rng := rand.New(rand.NewPCG(5, 6))
	var score float64
	const n = 200
	searches := 0
	for range n {
		tr, err := chatenv.Demonstrate(context.Background(), mh, task.Sample(rng), rng)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range tr.Messages {
			if m.Role == "tool" && strings.HasPrefix(m.Content, "error") {
				t.Fatalf("a demonstration's call failed: %+v", tr.Messages)
			}
			if m.Name == "search" {
				searches++
			}
		}
		if last := tr.Messages[len(tr.Messages)-1]; last.Role != "assistant" || len(last.ToolCalls) > 0 {
			t.Fatalf("no final answer: %+v", tr.Messages)
		}
		score += tr.Score
	}
	if mean := score / n; mean < 1-demoWrong-0.1 || mean > 1-demoWrong+0.1 || searches == 0 {
		t.Errorf("mean demonstration score %.3f (want ≈ %.2f), %d searches", mean, 1-demoWrong, searches)
	}
}
