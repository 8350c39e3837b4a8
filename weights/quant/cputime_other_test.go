//go:build !unix

package quant_test

import "time"

// cpuTime is unavailable here; benchmarks then skip the per-core metric.
func cpuTime() time.Duration { return 0 }
