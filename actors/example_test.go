package actors_test

import (
	"context"
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/actors"
)

// tally is a pure core: it sums its input and reports every third message.
type tally struct {
	actors.Effects[string]
	n, sum int
}

func (c *tally) Step(now time.Time, in int) {
	c.n++
	c.sum += in
	if c.n%3 == 0 {
		c.Send("tally.report", fmt.Sprintf("n=%d sum=%d", c.n, c.sum))
	}
}

func (c *tally) Tick(time.Time, string) {}

func ExampleSpawn() {
	sys, _ := actors.NewSystem(actors.DefaultSystemConfig())
	defer sys.Shutdown(context.Background())

	out := actors.SenderFunc[string](func(_ context.Context, subject, msg string) error {
		fmt.Println(subject, msg)
		return nil
	})
	sh, _ := actors.Spawn(sys, actors.DefaultShellConfig("tally", "example"),
		func() actors.Core[int, string] { return &tally{} }, actors.Sender[string](out))
	for i := 1; i <= 6; i++ {
		_ = sh.Tell(i)
	}
	_ = sh.Stop(context.Background()) // steps everything accepted, then stops
	// Output:
	// tally.report n=3 sum=6
	// tally.report n=6 sum=21
}
