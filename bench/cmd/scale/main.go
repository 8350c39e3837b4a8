// Command scale runs the scale benchmark of issue 22 (bench/scale): the
// real rollout actors, router, controller, filter and built-in engines in
// one process holding 1,024 → 8,192 → 32,768 → 131,072 multi-turn
// trajectories in flight. It prints a table and, with -json, writes the
// per-level figures.
//
//	go run ./bench/cmd/scale -max-level 1024
//	go run ./bench/cmd/scale -transport tcp -max-level 32768
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/bench/scale"
)

func main() {
	var o scale.Options
	levels := flag.String("levels", "", "comma-separated levels (default 1024,8192,32768,131072)")
	flag.IntVar(&o.MaxLevel, "max-level", 0, "run no level above this (0: all)")
	flag.StringVar(&o.Transport, "transport", "inproc", "router and engine hops: inproc (no sockets), tcp (loopback listeners, a connection per request as before issue 22) or tcp-bounded (MaxConnsPerHost)")
	flag.IntVar(&o.Engines, "engines", 0, "built-in engines (0: level/4096, at least 2)")
	flag.Float64Var(&o.TimeScale, "time-scale", 0, "latency model time scale (0: 0.8 × level/131072, at least 0.02, so a level's first trajectories outlast its ramp)")
	flag.IntVar(&o.MaxTurns, "max-turns", 4, "turns per trajectory")
	flag.IntVar(&o.StoreConcurrency, "store-concurrency", 0, "each rollout actor's bound on stores waiting on the trajectory buffer (0: rollout's default, 32)")
	flag.IntVar(&o.ControllerMailbox, "controller-mailbox", 0, "the controller shell's mailbox capacity (0: 1,024); small values overload it on purpose")
	flag.DurationVar(&o.StartHold, "start-hold", 3*time.Minute, "start barrier: the engines hold requests until the whole level is in flight or this long passed, then release them together (0: no hold; the peak then depends on the machine's pace)")
	flag.Float64Var(&o.Rounds, "rounds", 1.5, "groups admitted per level, in multiples of the level's groups")
	flag.StringVar(&o.HeapProfile, "heap-profile", "", "write the heap profile at the peak of the largest level here")
	flag.StringVar(&o.CPUProfile, "cpu-profile", "", "write the CPU profile of the largest level here")
	flag.StringVar(&o.MutexProfile, "mutex-profile", "", "write the mutex contention profile of the largest level here")
	jsonOut := flag.String("json", "", "write the results as JSON here")
	verbose := flag.Bool("v", false, "progress every second and the components' warnings")
	flag.Parse()
	if *levels != "" {
		for _, f := range strings.Split(*levels, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				fmt.Fprintf(os.Stderr, "scale: -levels: %q is not a positive integer\n", f)
				os.Exit(2)
			}
			o.Levels = append(o.Levels, n)
		}
	}
	o.Logger = zerolog.Nop()
	if *verbose {
		o.Logger = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
		o.Progress = func(s string) { fmt.Fprintln(os.Stderr, s) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := scale.Run(ctx, o)
	fmt.Print(scale.Table(res))
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if werr := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); werr != nil {
			fmt.Fprintln(os.Stderr, "scale:", werr)
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}
