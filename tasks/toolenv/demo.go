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
// are mostly right and well-formed, not all good: they teach the tool-call
// format and the shape of an episode (call with the question's expression,
// read the value, answer with it) and leave RL something to learn — the
// guesses and the calls with random operands score little, so calling
// with the question's own expression is what RL reinforces. The runaway
// share puts the tool's time limit into the warmed-up model's repertoire,
// so an RL run exercises that path too. A 2-layer, 64-wide Qwen3 after
// 60 SFT steps on guess 0.2 / right 0.5 made a well-formed call in 0.5 %
// of RL episodes (bench/results/tool-env.md): half the calls' operands
// were noise it could not predict, so the shares now lean on the right
// call.
const (
	// demoGuess: answer at once without the tool (a random number).
	demoGuess = 0.1
	// demoRunaway: the first call is an expression that runs into the
	// sandbox's CPU limit (then the demonstration calls again).
	demoRunaway = 0.05
	// demoRight: a call sends the question's own expression; otherwise
	// two random operands.
	demoRight = 0.8
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
