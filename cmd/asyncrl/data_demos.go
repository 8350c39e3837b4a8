package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/tasks"
	"github.com/asyncrl/asyncrl/tasks/chatenv"
)

// newDataDemosCmd: asyncrl data demos — chat JSONL of a task's
// demonstration episodes (tasks.Demonstrator): the SFT warm-up that
// teaches a randomly initialised model a task's answer format before RL
// (docs/models.md, examples/qwen3-tiny-sft.yaml).
func newDataDemosCmd(g *globals) *cobra.Command {
	var (
		task     string
		episodes int
		seed     uint64
	)
	cmd := &cobra.Command{
		Use:   "demos --task NAME [--episodes N] [--seed S] OUT.jsonl",
		Short: "Write chat JSONL ({\"messages\": [...]}) of a task's demonstration episodes: well-formed, not good, answers (an SFT warm-up)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := tasks.Get(task)
			if err != nil {
				return fail("asyncrl data demos: --task: %v (asyncrl env list)", err)
			}
			cd, chat := t.(chatenv.Demonstrator)
			d, ok := t.(tasks.Demonstrator)
			if !ok && !chat {
				return fail("asyncrl data demos: task %s has no demonstrations (tasks.Demonstrator): use one that has, e.g. guess_chat or calculator", task)
			}
			if episodes < 1 {
				return fail("asyncrl data demos: --episodes %d: want ≥ 1", episodes)
			}
			f, err := os.Create(args[0])
			if err != nil {
				return fail("asyncrl data demos: %v", err)
			}
			w := bufio.NewWriter(f)
			enc := json.NewEncoder(w)
			rng := rand.New(rand.NewPCG(seed, 0xde70))
			var score float64
			for range episodes {
				// A chat environment's demonstrations carry tool calls and
				// the tool's own answers (chatenv.Demonstrate steps it).
				var row any
				if chat {
					tr, err := chatenv.Demonstrate(cmd.Context(), cd, t.Sample(rng), rng)
					if err != nil {
						f.Close()
						return fmt.Errorf("asyncrl data demos: %w", err)
					}
					score, row = score+tr.Score, tr
				} else {
					tr, err := tasks.Demonstrate(d, t.Sample(rng), rng)
					if err != nil {
						f.Close()
						return fmt.Errorf("asyncrl data demos: %w", err)
					}
					score, row = score+tr.Score, tr
				}
				if err := enc.Encode(row); err != nil {
					f.Close()
					return fmt.Errorf("asyncrl data demos: %w", err)
				}
			}
			if err := w.Flush(); err != nil {
				f.Close()
				return fmt.Errorf("asyncrl data demos: %w", err)
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("asyncrl data demos: %w", err)
			}
			fmt.Fprintf(g.stdout, "%d %s episodes in %s (mean score %.3f)\n", episodes, task, args[0], score/float64(episodes))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&task, "task", "guess_chat", "task whose episodes to demonstrate")
	f.IntVar(&episodes, "episodes", 1000, "episodes to write")
	f.Uint64Var(&seed, "seed", 1, "seed: the same seed gives the same file")
	return cmd
}
