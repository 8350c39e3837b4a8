package node

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/actors/trainer"
	"github.com/asyncrl/asyncrl/internal/report"
)

// StepsFile is the run report's per-step log (one report.StepRow JSON
// object a line, written as each step is trained): `tail -f` follows a
// run, and the summary's per-step rows are read back from it at the end.
const StepsFile = "steps.jsonl"

// stepLog is where every trained step's row goes as it happens: the
// trainer and the ledger keep only the newest steps in memory (a run of
// days must not grow a record a step — issue 37), so the summary reads
// the run's rows back from here. With a report directory the rows are a
// file in it (StepsFile); without one (tests) they stay in memory.
type stepLog struct {
	mu      sync.Mutex
	start   time.Time
	f       *os.File
	w       *bufio.Writer
	mem     []report.StepRow
	err     error // the first write error; the summary says it
	closed  bool
	prevT   float64
	prevTok int64
	haveTok bool
}

// openStepLog truncates dir's StepsFile (a resumed run's report covers
// the steps this process trains, like its summary); dir "" keeps the
// rows in memory.
func openStepLog(dir string, start time.Time) (*stepLog, error) {
	l := &stepLog{start: start}
	if dir == "" {
		return l, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("node: step log: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, StepsFile))
	if err != nil {
		return nil, fmt.Errorf("node: step log: %w", err)
	}
	l.f, l.w = f, bufio.NewWriter(f)
	return l, nil
}

// add logs a trained step; tokens are the rollout tokens finished when it
// was announced (ok false: unknown, no rollout throughput in the row).
func (l *stepLog) add(st trainer.StepRecord, tokens int64, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return // a StepDone that came after the node stopped
	}
	row := stepRow(st, st.Done.Sub(l.start).Seconds())
	// Throughput per step: rollout tokens finished and the step's
	// mini-batch tokens over the wall time since the previous step.
	if el := row.ElapsedSeconds; el > l.prevT {
		row.TrainTokensPerSecond = float64(st.Tokens) / (el - l.prevT)
		if ok && l.haveTok {
			row.TokensPerSecond = float64(tokens-l.prevTok) / (el - l.prevT)
		}
	}
	l.prevT = row.ElapsedSeconds
	if ok {
		l.prevTok, l.haveTok = tokens, true
	}
	if l.w == nil {
		l.mem = append(l.mem, row)
		return
	}
	if l.err != nil {
		return
	}
	b, err := json.Marshal(row)
	if err == nil {
		b = append(b, '\n')
		if _, err = l.w.Write(b); err == nil {
			err = l.w.Flush() // a line at a time: the file follows the run
		}
	}
	if err != nil {
		l.err = fmt.Errorf("node: step log: %w", err)
	}
}

func stepRow(st trainer.StepRecord, elapsed float64) report.StepRow {
	return report.StepRow{Step: st.Step, Version: st.Version, RewardMean: st.RewardMean, Loss: st.Stats.Loss,
		Entropy: st.Stats.Entropy, GradNorm: st.Stats.GradNorm, Mismatch: st.Stats.Mismatch, Tokens: st.Tokens,
		MismatchSameVersion: st.Stats.MismatchSameVersion, SameVersionTokens: st.Stats.SameVersionTokens,
		Microbatches: st.Microbatches, StalenessMax: st.StalenessMax, ElapsedSeconds: elapsed,
		TrainSeconds: st.TrainTime.Seconds(), PublishSeconds: st.PublishTime.Seconds()}
}

// rows reads every logged row back (the summary: once, at the end).
func (l *stepLog) rows() ([]report.StepRow, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w == nil {
		return append([]report.StepRow(nil), l.mem...), nil
	}
	if l.err != nil {
		return nil, l.err
	}
	r, err := os.Open(l.f.Name())
	if err != nil {
		return nil, fmt.Errorf("node: step log: %w", err)
	}
	defer r.Close()
	var out []report.StepRow
	dec := json.NewDecoder(r)
	for {
		var row report.StepRow
		if err := dec.Decode(&row); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return out, fmt.Errorf("node: step log %s: %w", l.f.Name(), err)
		}
		out = append(out, row)
	}
}

// close closes the file (rows stays readable: it reopens by name).
func (l *stepLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}
