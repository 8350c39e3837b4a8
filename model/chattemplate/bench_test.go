package chattemplate

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/asyncrl/asyncrl/internal/realtok"
)

// BenchmarkRenderQwen3: one render of an n-message conversation with the
// real Qwen3 template (Continue renders the history once per turn).
func BenchmarkRenderQwen3(b *testing.B) {
	tok, err := LoadDir(realtok.Dir(b, realtok.Qwen3))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{2, 10, 40} {
		msgs := []Message{{Role: "system", Content: "Be brief."}}
		for i := 1; i < n; i++ {
			role := "user"
			if i%2 == 0 {
				role = "assistant"
			}
			msgs = append(msgs, Message{Role: role, Content: fmt.Sprintf("message %d with some words in it", i)})
		}
		raw, _ := json.Marshal(msgs)
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := tok.Render("", Input{Messages: raw, AddGenerationPrompt: true, Now: refNow}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkConversationTurn: Continue on a conversation of 10 turns (render
// of the history with the sentinel, cut, encode of the suffix).
func BenchmarkConversationTurn(b *testing.B) {
	tok, err := LoadDir(realtok.Dir(b, realtok.Qwen3))
	if err != nil {
		b.Fatal(err)
	}
	eos, _ := tok.TokenID("<|im_end|>")
	gen := append(tok.Encode("An answer of a few words."), eos)
	for b.Loop() {
		b.StopTimer()
		c, _ := tok.NewConversation(ConversationOptions{System: "Be brief.", Now: refNow})
		c.Open("first question")
		for k := 0; k < 9; k++ {
			c.Continue(gen, "another question")
		}
		b.StartTimer()
		if _, err := c.Continue(gen, "the last question"); err != nil {
			b.Fatal(err)
		}
	}
}
