package scale

import (
	"bufio"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RSSBytes is the process's resident set (VmRSS), 0 where /proc is absent.
func RSSBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// openFDs counts the process's open file descriptors (sockets among
// them), -1 where /proc is absent.
func openFDs() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(es)
}

// gcPauses reads the runtime's GC pause histogram.
func gcPauses() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// pauseQuantile is the q-quantile of the pauses in after that were not
// yet in before (upper bucket bound), in seconds.
func pauseQuantile(before, after *metrics.Float64Histogram, q float64) float64 {
	if after == nil {
		return 0
	}
	counts := slices.Clone(after.Counts)
	if before != nil && len(before.Counts) == len(counts) {
		for i := range counts {
			counts[i] -= before.Counts[i]
		}
	}
	var total uint64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(q*float64(total) + 0.5)
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= want && c > 0 {
			return after.Buckets[i+1]
		}
	}
	return after.Buckets[len(after.Buckets)-1]
}

// durations collects latencies from many goroutines.
type durations struct {
	mu sync.Mutex
	d  []time.Duration
}

func (d *durations) add(x time.Duration) {
	d.mu.Lock()
	d.d = append(d.d, x)
	d.mu.Unlock()
}

// quantiles returns the p50 and p99 in milliseconds and the count.
func (d *durations) quantiles() (p50, p99 float64, n int) {
	d.mu.Lock()
	s := slices.Clone(d.d)
	d.mu.Unlock()
	if len(s) == 0 {
		return 0, 0, 0
	}
	slices.Sort(s)
	at := func(q float64) float64 {
		i := min(len(s)-1, int(q*float64(len(s))))
		return float64(s[i]) / float64(time.Millisecond)
	}
	return at(0.5), at(0.99), len(s)
}

// peaks samples the process while a level runs.
type peaks struct {
	rss        int64
	goroutines int
	fds        int
	inFlight   int64
}

func (p *peaks) sample(inFlight int64) {
	p.rss = max(p.rss, RSSBytes())
	p.goroutines = max(p.goroutines, runtime.NumGoroutine())
	p.fds = max(p.fds, openFDs())
	p.inFlight = max(p.inFlight, inFlight)
}
