package multihop

import (
	"encoding/json"
	"math/rand/v2"

	"github.com/asyncrl/asyncrl/tasks/chatenv"
)

// Demonstration shares (DemoTurn): well-formed, not always good turns.
const (
	// demoSearch: find the first document by search before looking it up.
	demoSearch = 0.3
	// demoWrong: the final answer is another document's title.
	demoWrong = 0.2
)

// DemoTurn implements chatenv.Demonstrator: look the chain's documents up
// in order (the first one found by search first, demoSearch of the time),
// then answer with the fact the second holds (or a wrong title, demoWrong).
func (t *Task) DemoTurn(history []chatenv.Message, rng *rand.Rand) chatenv.Message {
	var q *Question
	seen := [2]bool{}
	searched := false
	for _, m := range history {
		if m.Role == "user" {
			for i := range t.corpus.Questions {
				if t.corpus.Questions[i].Text == m.Content {
					q = &t.corpus.Questions[i]
				}
			}
		}
		if m.Role == "tool" && q != nil {
			for h := range 2 {
				if d, _ := t.corpus.Lookup(q.Hops[h]); d.Text == m.Content {
					seen[h] = true
				}
			}
			searched = searched || m.Name == "search"
		}
	}
	switch {
	case q == nil:
		return chatenv.Message{Role: "assistant", Content: "I do not know."}
	case seen[1]:
		if rng.Float64() < demoWrong {
			return chatenv.Message{Role: "assistant", Content: t.corpus.Docs[rng.IntN(len(t.corpus.Docs))].Title}
		}
		return chatenv.Message{Role: "assistant", Content: q.Answer}
	case seen[0]:
		return call("lookup", "title", q.Hops[1])
	case !searched && rng.Float64() < demoSearch:
		return call("search", "query", q.Hops[0])
	default:
		return call("lookup", "title", q.Hops[0])
	}
}

func call(name, key, value string) chatenv.Message {
	args, _ := json.Marshal(map[string]string{key: value})
	return chatenv.Message{Role: "assistant", ToolCalls: []chatenv.ToolCall{{Type: "function",
		Function: chatenv.FunctionCall{Name: name, Arguments: args}}}}
}
