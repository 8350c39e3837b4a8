package staleness_test

import (
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/actors/staleness"
)

// One group through the loop: admitted, finished with tokens of version 0,
// checked before training, then the step completes.
func ExampleController() {
	c, err := staleness.New(staleness.Config{
		MaxStalenessSteps: 1, NumParallelGenerationWorkers: 4, MiniBatchSize: 2,
		StalePolicy: staleness.PolicyRequeue,
	})
	if err != nil {
		panic(err)
	}
	now := time.Unix(0, 0)
	adm, ok := c.TryAcquire("prompt-1", now)
	fmt.Println(ok, adm.GroupID, c.Capacity())
	_ = c.Accept(adm.GroupID, 0, now)
	d, _ := c.CheckForTraining(adm.GroupID, now)
	fmt.Println(d)
	_, _ = c.StepDone(1, now)
	fmt.Println(c.Step(), c.Capacity())
	// Output:
	// true prompt-1#1 3
	// train group=prompt-1#1 prompt=prompt-1 staleness=0 (scheduled 0, token 0) violation=false step=1
	// 2 4
}
