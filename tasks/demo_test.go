package tasks

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// Demonstrations of guess_chat are well-formed chats: alternating user and
// assistant messages, every guess a number in range, the score the sum of
// the task's rewards, and the episode ends when solved or out of turns.
func TestDemonstrateGuessChat(t *testing.T) {
	task := mustGet(t, "guess_chat").(*GuessTask)
	rng := rand.New(rand.NewPCG(1, 2))
	var won, consistentOnly int
	for i := range 200 {
		p := task.Sample(rng)
		tr, err := Demonstrate(task, p, rng)
		if err != nil {
			t.Fatal(err)
		}
		m := tr.Messages
		if m[0].Role != "user" || !strings.HasPrefix(m[0].Content, "I'm thinking of a whole number from 1 to 20.") {
			t.Fatalf("episode %d starts with %+v", i, m[0])
		}
		if m[len(m)-1].Role != "assistant" || len(m) > 2*task.MaxTurns() {
			t.Fatalf("episode %d: %d messages, last %+v", i, len(m), m[len(m)-1])
		}
		for j, msg := range m {
			want := "user"
			if j%2 == 1 {
				want = "assistant"
				g, err := strconv.Atoi(msg.Content)
				if err != nil || g < 1 || g > 20 {
					t.Fatalf("episode %d: guess %q", i, msg.Content)
				}
			}
			if msg.Role != want {
				t.Fatalf("episode %d message %d: role %s, want %s", i, j, msg.Role, want)
			}
		}
		// replay the actions on a fresh env: the same score
		env := task.NewEnv()
		if _, err := env.Reset(p); err != nil {
			t.Fatal(err)
		}
		var score float64
		var done bool
		for j := 1; j < len(m); j += 2 {
			_, r, d, err := env.Step(m[j].Content)
			if err != nil {
				t.Fatal(err)
			}
			score, done = score+r, d
		}
		if score != tr.Score {
			t.Fatalf("episode %d: transcript score %v, replayed %v", i, tr.Score, score)
		}
		if done && m[len(m)-1].Content == strconv.Itoa(1+seedRand(p.Seed).IntN(20)) {
			won++
		}
		if tr.Score > 0 && tr.Score < 0.5 {
			consistentOnly++
		}
	}
	// random but well-formed: some episodes won, some not
	if won == 0 || won == 200 {
		t.Fatalf("%d of 200 demonstrations won; want a mix", won)
	}
	if consistentOnly == 0 {
		t.Fatalf("no demonstration lost: the actions are not random")
	}
}

// The chat wording parses back and a compact prompt is refused by it.
func TestGuessChatPrompt(t *testing.T) {
	task := mustGet(t, "guess_chat")
	env := task.NewEnv()
	if _, err := env.Reset(Prompt{Text: "guess 1-20:", Seed: 1}); err == nil {
		t.Fatal("guess_chat accepted the compact prompt")
	}
	obs, err := env.Reset(Prompt{Text: "I'm thinking of a whole number from 1 to 7. Guess it: answer with the number only.", Seed: 1})
	if err != nil || !strings.Contains(obs, "1 to 7") {
		t.Fatalf("Reset = %q, %v", obs, err)
	}
	reply, _, _, err := env.Step("zero")
	if err != nil || !strings.HasPrefix(reply, "Invalid") {
		t.Fatalf("an invalid guess: %q, %v", reply, err)
	}
}
