package driver_test

import (
	"testing"

	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/enginetest"
)

// TestParseMetricsBothKinds: the one parser reads either kind's fixture
// text (the same bodies the fakes serve) to the fixture's expected values.
func TestParseMetricsBothKinds(t *testing.T) {
	for _, kind := range []driver.Kind{driver.KindVLLM, driver.KindSGLang} {
		fix := enginetest.MustFixtures(kind)["metrics"]
		m, err := driver.ParseMetrics(fix.Body())
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		want := fix.Expect
		if !m.HasLoad || m.Running != want["running"] || m.Waiting != want["waiting"] || m.KVCacheUsage != want["kv_cache_usage"] {
			t.Errorf("%s: %+v, want %v", kind, m, want)
		}
	}
}

// TestParseMetricsKVIsFullestSeries: queue lengths add over DP ranks, the
// KV usage is the fullest rank's (a sum of ratios would exceed 1).
func TestParseMetricsKVIsFullestSeries(t *testing.T) {
	text := "# TYPE sglang:num_queue_reqs gauge\n" +
		"sglang:num_queue_reqs{dp_rank=\"0\"} 3\nsglang:num_queue_reqs{dp_rank=\"1\"} 4\n" +
		"# TYPE sglang:token_usage gauge\n" +
		"sglang:token_usage{dp_rank=\"0\"} 0.6\nsglang:token_usage{dp_rank=\"1\"} 0.7\n"
	m, err := driver.ParseMetrics([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if m.Waiting != 7 || m.KVCacheUsage != 0.7 || !m.HasLoad {
		t.Fatalf("%+v: want waiting 7, kv 0.7", m)
	}
	m, err = driver.ParseMetrics([]byte("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3\n"))
	if err != nil || m.HasLoad {
		t.Fatalf("no load gauges: %+v %v", m, err)
	}
	if _, err := driver.ParseMetrics([]byte("vllm:num_requests_waiting NaNx\n")); err == nil {
		t.Fatal("malformed text parsed")
	}
}
