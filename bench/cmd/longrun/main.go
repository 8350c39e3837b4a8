// Command longrun is the long-run memory benchmark of issue 37 (`make
// bench-long`): the default loop (`asyncrl run`'s config.Default()) with
// filter.mode none for 10,000 steps in this process — the embedded NATS
// server with its JetStream store on disk, the built-in engines behind
// the router, the rollout, sampling, controller, trainer and publisher
// actors — printing the process's RSS and Go heap against steps, and a
// one-line verdict: RSS after the last step against RSS after step 1,000.
//
//	go run ./bench/cmd/longrun                        # 10,000 steps, a row every 500
//	go run ./bench/cmd/longrun -steps 2000 -every 250 -heap-profiles /tmp/heap
//
// RSS is VmRSS from /proc/self/status (Linux); the heap is the live heap
// after a forced GC (runtime.MemStats.HeapAlloc), read in the trainer's
// goroutine right after the step's version was published
// (node.Options.AfterStep), so no step is in the trainer at the time.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/bench/scale"
	"github.com/asyncrl/asyncrl/cluster/node"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/model"
)

func main() {
	steps := flag.Int("steps", 10000, "trainer steps to run")
	every := flag.Int("every", 500, "print a row every this many steps")
	ref := flag.Int("ref", 1000, "the step whose RSS the verdict compares the last step's with")
	limit := flag.Float64("limit", 10, "the verdict's allowance: RSS after the last step within this many percent of RSS after -ref")
	mode := flag.String("filter", "none", "filter.mode")
	profiles := flag.String("heap-profiles", "", "write a heap profile (after GC) at every row into this directory")
	rate := flag.Int("memprofilerate", 0, "runtime.MemProfileRate for -heap-profiles (0: Go's default, one sample per 512 KiB; 1 records every allocation)")
	verbose := flag.Bool("v", false, "also print the Go runtime's retained heap (HeapSys − HeapReleased), stacks and Sys, in MB")
	dupWindow := flag.Duration("dup-window", 0, "the trajectory buffer's duplicate window (node.Options.GroupDuplicates; 0: JetStream's 2 minutes): the server keeps every group id of the window, a heap that fills for that long and then stays")
	dir := flag.String("dir", "", "run.data_dir and run.report_dir parent (default: a temporary directory, removed after)")
	flag.Parse()
	if *ref > *steps || *every < 1 {
		fmt.Fprintln(os.Stderr, "longrun: want -every ≥ 1 and -ref ≤ -steps")
		os.Exit(2)
	}
	work := *dir
	if work == "" {
		d, err := os.MkdirTemp("", "asyncrl-longrun-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "longrun:", err)
			os.Exit(1)
		}
		defer os.RemoveAll(d)
		work = d
	}
	cfg := config.Default()
	cfg.Run.ID = "longrun"
	cfg.Run.Steps = *steps
	cfg.Run.DataDir = filepath.Join(work, "data")
	cfg.Run.ReportDir = filepath.Join(work, "report")
	cfg.Filter.Mode = config.FilterMode(*mode)
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "longrun: config:", err)
		os.Exit(1)
	}
	if *profiles != "" {
		if *rate > 0 {
			runtime.MemProfileRate = *rate
		}
		if err := os.MkdirAll(*profiles, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "longrun:", err)
			os.Exit(1)
		}
	}
	fmt.Printf("longrun: the default loop (task %s, B=%d n=%d W=%d S=%d, %d engines), filter.mode %s, %d steps; GOMAXPROCS %d\n",
		cfg.Rollout.Task, cfg.Trainer.MiniBatchSize, cfg.Rollout.NSamplesPerPrompt, cfg.Trainer.NumParallelGenerationWorkers,
		cfg.Trainer.MaxStalenessSteps, cfg.Engines.Count, cfg.Filter.Mode, *steps, runtime.GOMAXPROCS(0))
	fmt.Printf("%8s %10s %10s %12s %10s\n", "step", "RSS MB", "heap MB", "heap objects", "elapsed")
	m := &memRows{steps: *steps, every: *every, ref: *ref, profiles: *profiles, verbose: *verbose, start: time.Now()}
	m.mid = (*steps + *ref) / 2 / *every * *every // a row half way: is the second half flat?
	opts := node.Options{Logger: zerolog.Nop(), GroupDuplicates: *dupWindow, AfterStep: func(_ context.Context, _ *model.Trainer, v int64) error {
		m.afterStep(int(v))
		return nil
	}}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	sum, err := node.Run(ctx, cfg, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "longrun: run:", err)
	}
	fmt.Printf("longrun: %d steps in %s, trajectories lost %d\n", sum.Steps, time.Since(m.start).Round(time.Second), sum.TrajectoriesLost)
	if !m.verdict(*limit) || err != nil {
		os.Exit(1)
	}
}

// memRows samples RSS and the heap after the steps it prints a row for
// (every every steps, the last) and the ones the verdict compares (ref,
// the last, mid).
type memRows struct {
	steps, every, ref, mid  int
	profiles                string
	verbose                 bool
	start                   time.Time
	rssRef, rssLast, rssMid float64
}

// afterStep runs in the trainer's goroutine after step s was published.
func (m *memRows) afterStep(s int) {
	if s%m.every != 0 && s != m.ref && s != m.steps {
		return
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss := rssMB()
	if s == m.ref {
		m.rssRef = rss
	}
	if s == m.steps {
		m.rssLast = rss
	}
	if s == m.mid {
		m.rssMid = rss
	}
	if s%m.every == 0 || s == m.steps {
		m.printRow(s, rss, &ms)
	}
}

func (m *memRows) printRow(s int, rss float64, ms *runtime.MemStats) {
	fmt.Printf("%8d %10.1f %10.1f %12d %10s", s, rss, float64(ms.HeapAlloc)/(1<<20), ms.HeapObjects, time.Since(m.start).Round(time.Second))
	if m.verbose {
		fmt.Printf("  retained %.1f stacks %.1f sys %.1f gcs %d", float64(ms.HeapSys-ms.HeapReleased)/(1<<20),
			float64(ms.StackSys)/(1<<20), float64(ms.Sys)/(1<<20), ms.NumGC)
	}
	fmt.Println()
	if m.profiles != "" {
		writeProfile(filepath.Join(m.profiles, fmt.Sprintf("heap-%06d.pprof", s)))
	}
}

// verdict prints the second half's growth and the verdict (RSS after the
// last step within limit percent of RSS after ref); false on FAIL or an
// incomplete run.
func (m *memRows) verdict(limit float64) bool {
	if m.rssRef == 0 || m.rssLast == 0 {
		fmt.Printf("verdict: incomplete (RSS at step %d: %.1f MB, at step %d: %.1f MB)\n", m.ref, m.rssRef, m.steps, m.rssLast)
		return false
	}
	growth := 100 * (m.rssLast - m.rssRef) / m.rssRef
	ok := growth <= limit
	if m.rssMid > 0 && m.mid > m.ref && m.mid < m.steps {
		fmt.Printf("second half: RSS after step %d %.1f MB vs after step %d %.1f MB: %+.1f %%\n", m.steps, m.rssLast, m.mid, m.rssMid, 100*(m.rssLast-m.rssMid)/m.rssMid)
	}
	fmt.Printf("verdict: RSS after step %d %.1f MB vs after step %d %.1f MB: %+.1f %% (limit %.0f %%): %s\n",
		m.steps, m.rssLast, m.ref, m.rssRef, growth, limit, map[bool]string{true: "PASS", false: "FAIL"}[ok])
	return ok
}

// rssMB is the process's resident set (VmRSS) in MB; 0 where
// /proc/self/status is missing.
func rssMB() float64 { return float64(scale.RSSBytes()) / (1 << 20) }

func writeProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "longrun:", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		fmt.Fprintln(os.Stderr, "longrun:", err)
	}
}
