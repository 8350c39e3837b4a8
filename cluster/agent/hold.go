package agent

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// HoldKind is the EventRecord kind of a hold (Config.HoldFile): the
// holder stopped at a named point of its term (Dep) at global step or
// version Step, and stays there while the hold file names that point.
const HoldKind = "hold"

// The points a term can be held at (Config.HoldFile), each inside a
// window a node-loss test kills a node in:
const (
	// HoldCheckpointWrite: a trainer checkpoint's files are uploaded, its
	// manifest (the commit) is not (Step: the global version).
	HoldCheckpointWrite = "checkpoint-write"
	// HoldSave: a step is trained and checkpointed; its fenced progress
	// write is about to go out (Step: the global step).
	HoldSave = "save"
	// HoldMarks: a step's progress is durable; its prompts are not
	// marked trained yet (Step: the global step).
	HoldMarks = "marks"
	// HoldPublish: a version's weights are in the term's bucket; the
	// publisher has not told the engines yet (Step: the global version).
	HoldPublish = "publish"
)

// holdMax bounds one hold: a test that never releases it (it died) does
// not stop the node for good.
const holdMax = 2 * time.Minute

// hold stops the calling goroutine at point while the hold file names it
// (a test's kill moment: it waits for the hold record, kills a node, and
// removes the file). Without Config.HoldFile it returns at once: one
// stat per point in a test, nothing in production.
func (a *Agent) hold(point string, step int64) {
	if a.cfg.HoldFile == "" || !a.holdNamed(point) {
		return
	}
	line := fmt.Sprintf("hold at %s (step %d)", point, step)
	a.emit(line, EventRecord{Kind: HoldKind, Agent: a.cfg.Name, Dep: point, Step: step, Line: line})
	deadline := time.Now().Add(holdMax)
	for a.holdNamed(point) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

func (a *Agent) holdNamed(point string) bool {
	b, err := os.ReadFile(a.cfg.HoldFile)
	return err == nil && strings.TrimSpace(string(b)) == point
}
