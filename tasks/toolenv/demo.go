package toolenv

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"

	"github.com/asyncrl/asyncrl/tasks/chatenv"
)

// The shares of the calculator's demonstrations (DemoTurn). Demonstrations
// are well-formed, not good: they teach the tool-call format and the
// shape of an episode (call, read the value, answer with it), and leave
// RL something to learn — which expression to send, and that calling
// beats guessing. The runaway share puts the tool's time limit into the
// warmed-up model's repertoire, so an RL run exercises that path too.
const (
	// demoGuess: answer at once without the tool (a random number).
	demoGuess = 0.2
	// demoRunaway: the first call is an expression that runs into the
	// sandbox's CPU limit (then the demonstration calls again).
	demoRunaway = 0.05
	// demoRight: a call sends the question's own expression; otherwise
	// two random operands.
	demoRight = 0.5
	// runawayExpr runs past any CPU limit (TestSandboxLimits).
	runawayExpr = "9**9**9**9"
)

var (
	_ chatenv.Demonstrator = (*Calculator)(nil)

	asked = regexp.MustCompile(`What is (-?\d+)([+-])(-?\d+)\?`)
)

// DemoTurn implements chatenv.Demonstrator: after the question, a guess
// (demoGuess), a runaway call (demoRunaway) or a calc call with the
// question's expression (demoRight) or a random one; after a tool error,
// another call; after a value, the value as the answer.
func (c *Calculator) DemoTurn(history []chatenv.Message, rng *rand.Rand) chatenv.Message {
	last := history[len(history)-1]
	if last.Role == "tool" && !strings.HasPrefix(last.Content, "error:") {
		return chatenv.Message{Role: "assistant", Content: last.Content}
	}
	if last.Role != "tool" {
		switch u := rng.Float64(); {
		case u < demoGuess:
			return chatenv.Message{Role: "assistant", Content: fmt.Sprint(rng.IntN(2*c.cfg.MaxOperand+1) - c.cfg.MaxOperand/2)}
		case u < demoGuess+demoRunaway:
			return calcCall(runawayExpr)
		}
	}
	var m []string
	for _, h := range history {
		if h.Role == "user" {
			m = asked.FindStringSubmatch(h.Content)
		}
	}
	if m != nil && rng.Float64() < demoRight {
		return calcCall(m[1] + m[2] + m[3])
	}
	return calcCall(fmt.Sprintf("%d%c%d", rng.IntN(c.cfg.MaxOperand+1), "+-"[rng.IntN(2)], rng.IntN(c.cfg.MaxOperand+1)))
}

func calcCall(expr string) chatenv.Message {
	args, _ := json.Marshal(map[string]string{"expr": expr})
	return chatenv.Message{Role: "assistant", ToolCalls: []chatenv.ToolCall{{Type: "function",
		Function: chatenv.FunctionCall{Name: "calc", Arguments: args}}}}
}
