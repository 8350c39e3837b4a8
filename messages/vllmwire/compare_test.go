//go:build unix

package vllmwire

import (
	"encoding/json"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/messages"
)

// TestR3Compare is BENCHMARKS.md's side-by-side run of the R3 methods
// (bench_test.go's batch), interleaved round by round so that load on the
// shared machine hits all of them alike, with wall and process CPU time
// (user+sys, GC workers included) per method. Opt-in (seconds of work):
//
//	ASYNCRL_R3_BENCH=1 go test ./messages/vllmwire -run TestR3Compare -v
func TestR3Compare(t *testing.T) {
	if os.Getenv("ASYNCRL_R3_BENCH") == "" {
		t.Skip("set ASYNCRL_R3_BENCH=1 to run the R3 comparison")
	}
	b := &testing.B{}
	routes := benchRoutes()
	with, without := benchBatch(b, routes), benchBatch(b, nil)
	nested := make([][][][]int32, benchSeqs)
	for s, r := range routes {
		nested[s] = make([][][]int32, benchTokens)
		for tk := range nested[s] {
			nested[s][tk] = make([][]int32, benchLayers)
			for l := range benchLayers {
				o := (tk*benchLayers + l) * benchTopK
				nested[s][tk][l] = r[o : o+benchTopK]
			}
		}
	}
	stride := benchLayers * benchTopK
	per := benchTokens / benchTurns
	methods := []struct {
		name string
		run  func() int // bytes on the wire
	}{
		{"packed Arrow (whole batch)", func() int {
			data, _ := messages.EncodeTokenBatch(with)
			back, err := messages.DecodeTokenBatch(data)
			if err != nil || len(back.Routes.Data) != benchSeqs*benchTokens*stride {
				t.Fatal(err)
			}
			return len(data)
		}},
		{"packed Arrow, no routes column", func() int {
			data, _ := messages.EncodeTokenBatch(without)
			if _, err := messages.DecodeTokenBatch(data); err != nil {
				t.Fatal(err)
			}
			return len(data)
		}},
		{"JSON+base64 .npy per turn", func() int {
			n := 0
			flat := make([]int32, 0, benchSeqs*benchTokens*stride)
			for _, r := range routes {
				for turn := range benchTurns {
					w, _ := EncodeRoutedExperts(r[turn*per*stride:(turn+1)*per*stride], per, benchLayers, benchTopK, benchExperts)
					data, _ := json.Marshal(choiceBody{RoutedExperts: &w})
					n += len(data)
					var back choiceBody
					if err := json.Unmarshal(data, &back); err != nil {
						t.Fatal(err)
					}
					got, err := DecodeRoutedExperts(*back.RoutedExperts, benchExperts, benchLayers, benchTopK)
					if err != nil {
						t.Fatal(err)
					}
					flat = append(flat, got.Values...)
				}
			}
			if len(flat) != benchSeqs*benchTokens*stride {
				t.Fatal("routes lost")
			}
			return n
		}},
		{"JSON lists per token", func() int {
			data, _ := json.Marshal(nested)
			var back [][][][]int32
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			flat := make([]int32, 0, benchSeqs*benchTokens*stride)
			for _, s := range back {
				for _, tk := range s {
					for _, l := range tk {
						flat = append(flat, l...)
					}
				}
			}
			if len(flat) != benchSeqs*benchTokens*stride {
				t.Fatal("routes lost")
			}
			return len(data)
		}},
	}
	const rounds = 5
	wall := make([][]float64, len(methods))
	cpu := make([][]float64, len(methods))
	bytes := make([]int, len(methods))
	for range rounds {
		for i, m := range methods {
			runtime.GC()
			c0, w0 := cpuTime(), time.Now()
			bytes[i] = m.run()
			wall[i] = append(wall[i], time.Since(w0).Seconds()*1e3)
			cpu[i] = append(cpu[i], (cpuTime()-c0).Seconds()*1e3)
		}
	}
	med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	routesBytes := bytes[0] - bytes[1]
	routesCPU := med(cpu[0]) - med(cpu[1])
	t.Logf("batch: %d seqs × %d tokens × %d layers × top-%d of %d experts (%d route values); medians of %d interleaved rounds",
		benchSeqs, benchTokens, benchLayers, benchTopK, benchExperts, benchSeqs*benchTokens*stride, rounds)
	for i, m := range methods {
		t.Logf("%-32s %10d B  wall %8.1f ms  cpu %8.1f ms", m.name, bytes[i], med(wall[i]), med(cpu[i]))
	}
	t.Logf("routes column alone (with − without): %d B, cpu %.1f ms", routesBytes, routesCPU)
	for _, i := range []int{2, 3} {
		t.Logf("%s vs packed routes column: bytes ×%.2f, cpu ×%.1f (vs the whole packed batch: cpu ×%.1f)",
			methods[i].name, float64(bytes[i])/float64(routesBytes), med(cpu[i])/routesCPU, med(cpu[i])/med(cpu[0]))
	}
}

// cpuTime is the process's user+sys CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
