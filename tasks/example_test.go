package tasks_test

import (
	"fmt"

	"github.com/asyncrl/asyncrl/tasks"
)

// A multi-turn episode: the caller appends each action and the env's reply
// to the conversation and sums the step rewards.
func Example() {
	task, err := tasks.Get("guess")
	if err != nil {
		panic(err)
	}
	env := task.NewEnv()
	conv, _ := env.Reset(tasks.Prompt{Text: "guess 1-4:", Seed: 3})
	score := 0.0
	for _, action := range []string{"3", "2", "1", "4"} {
		obs, r, done, err := env.Step(action)
		if err != nil {
			panic(err)
		}
		conv, score = conv+action+obs, score+r
		if done {
			break
		}
	}
	fmt.Println(conv)
	fmt.Printf("%.3f\n", score)
	// Output:
	// guess 1-4:3 lower:2 lower:1 correct
	// 0.793
}

func ExampleGet() {
	task, _ := tasks.Get("reverse")
	env := task.NewEnv()
	obs, _ := env.Reset(tasks.Prompt{Text: "rev abc="})
	for _, answer := range []string{"cba", "cab", "zzz"} {
		env.Reset(tasks.Prompt{Text: obs})
		_, r, _, _ := env.Step(answer)
		fmt.Printf("%s %s → %.3f\n", obs, answer, r)
	}
	// Output:
	// rev abc= cba → 1.000
	// rev abc= cab → 0.467
	// rev abc= zzz → 0.100
}
