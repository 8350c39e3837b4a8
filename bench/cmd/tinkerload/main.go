// Command tinkerload runs the Tinker server's load benchmark
// (bench/tinkerload): `make bench-tinker`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/asyncrl/asyncrl/bench/tinkerload"
)

func main() {
	var o tinkerload.Options
	flag.IntVar(&o.N, "n", 131072, "sample futures in flight")
	flag.DurationVar(&o.Delay, "delay", 20*time.Millisecond, "stub engine time per completion")
	flag.IntVar(&o.EngineConcurrency, "engine-concurrency", 256, "tinker.sample_concurrency")
	flag.IntVar(&o.Conns, "conns", 128, "client connections (submitters, then pollers)")
	flag.IntVar(&o.Tokens, "tokens", 16, "tokens per completion")
	flag.BoolVar(&o.Protobuf, "protobuf", false, "poll with Accept: application/x-protobuf and read the answers as tinker SDK 0.25 does")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	dir, err := os.MkdirTemp("", "tinkerload-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	o.Dir = dir
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	res, err := tinkerload.Run(ctx, o)
	fmt.Println(res)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tinkerload:", err)
		os.Exit(1)
	}
}
