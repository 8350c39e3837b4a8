package actors

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

func TestBackoffTable(t *testing.T) {
	c := SupervisionConfig{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Multiplier: 2, Jitter: 0.5, MaxFailures: 10, Window: time.Minute}
	ms := time.Millisecond
	for _, tc := range []struct {
		n    int
		u    float64
		want time.Duration
	}{
		{1, 0.5, 100 * ms}, // u=0.5 is no jitter
		{2, 0.5, 200 * ms},
		{3, 0.5, 400 * ms},
		{4, 0.5, 800 * ms},
		{5, 0.5, time.Second}, // 1.6s capped
		{50, 0.5, time.Second},
		{0, 0.5, 100 * ms}, // n<1 treated as first failure
		{1, 0, 50 * ms},    // -50% jitter
		{1, 0.75, 125 * ms},
		{4, 0.999999, time.Second}, // +50% of 800ms capped
	} {
		if got := c.Backoff(tc.n, tc.u); got < tc.want-time.Microsecond || got > tc.want+time.Microsecond {
			t.Errorf("Backoff(%d, %v) = %v, want %v", tc.n, tc.u, got, tc.want)
		}
	}
	c.Multiplier = 1
	if got := c.Backoff(9, 0.5); got != 100*ms {
		t.Errorf("multiplier 1: %v", got)
	}
}

func TestDefaultConfigsValidate(t *testing.T) {
	if err := DefaultSupervisionConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if err := DefaultShellConfig("x", "r").Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultSupervisionConfig()
	c.Jitter = -0.1
	if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Jitter") {
		t.Fatalf("error must name the field: %v", err)
	}
}

func TestRateLimiter(t *testing.T) {
	r := NewRateLimiter(10 * time.Second)
	type step struct {
		at      time.Duration
		key     string
		ok      bool
		dropped int
	}
	for i, s := range []step{
		{0, "a", true, 0},
		{1 * time.Second, "a", false, 0},
		{2 * time.Second, "b", true, 0}, // keys are independent
		{3 * time.Second, "a", false, 0},
		{9 * time.Second, "a", false, 0},
		{10 * time.Second, "a", true, 3}, // one interval after the last written
		{11 * time.Second, "a", false, 0},
		{25 * time.Second, "a", true, 1},
	} {
		ok, n := r.Allow(t0.Add(s.at), s.key)
		if ok != s.ok || n != s.dropped {
			t.Fatalf("step %d (%s@%v): got (%v,%d), want (%v,%d)", i, s.key, s.at, ok, n, s.ok, s.dropped)
		}
	}
	_, _ = r.Allow(t0.Add(26*time.Second), "a") // suppressed
	// b has been quiet since 2s with nothing held back; a has 1 held back
	// but wrote at 25s, so it is not yet flushable at 30s.
	if got := r.Flush(t0.Add(30 * time.Second)); len(got) != 0 {
		t.Fatalf("flush at 30s: %+v", got)
	}
	if r.Len() != 1 {
		t.Fatalf("quiet key b not forgotten: len %d", r.Len())
	}
	got := r.Flush(t0.Add(35 * time.Second))
	if len(got) != 1 || got[0] != (Suppressed{Key: "a", Count: 1}) {
		t.Fatalf("flush at 35s: %+v", got)
	}
	if r.Len() != 0 {
		t.Fatal("flushed key kept")
	}
	all := NewRateLimiter(0)
	for range 3 {
		if ok, _ := all.Allow(t0, "k"); !ok {
			t.Fatal("interval 0 must allow everything")
		}
	}
}

func TestLimitedLogger(t *testing.T) {
	buf := &syncBuf{}
	clk := NewManualClock(t0)
	l := NewLimitedLogger(zerolog.New(buf), clk, time.Second)
	for range 5 {
		l.Warn("k").Msg("hot")
	}
	l.Error("other").Msg("cold")
	if buf.count(`"message":"hot"`) != 1 || buf.count(`"message":"cold"`) != 1 {
		t.Fatalf("log:\n%s", buf.String())
	}
	clk.Advance(2 * time.Second)
	l.Warn("unrelated").Msg("x") // triggers the flush of k's 4 held-back lines
	if buf.count(`"key":"k","suppressed":4`) != 1 {
		t.Fatalf("no summary:\n%s", buf.String())
	}
}

func TestManualClock(t *testing.T) {
	c := NewManualClock(t0)
	var order []string
	var seenAt []time.Time
	add := func(name string) func() {
		return func() { order = append(order, name); seenAt = append(seenAt, c.Now()) }
	}
	c.AfterFunc(3*time.Second, add("c"))
	c.AfterFunc(time.Second, add("a"))
	stopB := c.AfterFunc(2*time.Second, add("b"))
	c.AfterFunc(time.Second, add("a2")) // same deadline: arming order
	c.AfterFunc(0, add("now"))          // immediate
	if !stopB() || stopB() {
		t.Fatal("stop must report true once")
	}
	c.AfterFunc(2*time.Second, func() {
		add("d")()
		c.AfterFunc(500*time.Millisecond, add("chained")) // due within the same Advance
	})
	if got := c.Pending(); len(got) != 4 || !got[0].Equal(t0.Add(time.Second)) {
		t.Fatalf("pending %v", got)
	}
	c.Advance(5 * time.Second)
	if strings.Join(order, ",") != "now,a,a2,d,chained,c" {
		t.Fatalf("order %v", order)
	}
	wantAt := []time.Duration{0, time.Second, time.Second, 2 * time.Second, 2500 * time.Millisecond, 3 * time.Second}
	for i, w := range wantAt {
		if !seenAt[i].Equal(t0.Add(w)) {
			t.Fatalf("%s saw now=%v, want t0+%v", order[i], seenAt[i].Sub(t0), w)
		}
	}
	if !c.Now().Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("now %v", c.Now())
	}
	c.Set(t0) // never backwards
	if !c.Now().Equal(t0.Add(5 * time.Second)) {
		t.Fatal("clock went backwards")
	}
}

func TestPromSink(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := NewPromSink(reg,
		MetricDef{Name: "asyncrl_t_total", Help: "h", Kind: CounterAdd, Labels: []string{"k"}},
		MetricDef{Name: "asyncrl_t_gauge", Help: "h", Kind: GaugeSet},
		MetricDef{Name: "asyncrl_t_seconds", Help: "h", Kind: Observe},
	)
	if err != nil {
		t.Fatal(err)
	}
	must := func(m Metric) {
		t.Helper()
		if err := s.Apply(m); err != nil {
			t.Fatal(err)
		}
	}
	must(Metric{Name: "asyncrl_t_total", Kind: CounterAdd, LabelValues: []string{"x"}, Value: 2})
	must(Metric{Name: "asyncrl_t_total", Kind: CounterAdd, LabelValues: []string{"x"}, Value: 3})
	must(Metric{Name: "asyncrl_t_gauge", Kind: GaugeSet, Value: 7})
	must(Metric{Name: "asyncrl_t_gauge", Kind: GaugeAdd, Value: -2})
	must(Metric{Name: "asyncrl_t_seconds", Kind: Observe, Value: 0.3})
	if v := testutil.ToFloat64(s.byName["asyncrl_t_total"].counter.WithLabelValues("x")); v != 5 {
		t.Fatalf("counter %v", v)
	}
	if v := testutil.ToFloat64(s.byName["asyncrl_t_gauge"].gauge.WithLabelValues()); v != 5 {
		t.Fatalf("gauge %v", v)
	}
	for _, bad := range []Metric{
		{Name: "asyncrl_nope", Kind: CounterAdd, Value: 1},
		{Name: "asyncrl_t_total", Kind: GaugeSet, Value: 1, LabelValues: []string{"x"}},
		{Name: "asyncrl_t_total", Kind: CounterAdd, Value: -1, LabelValues: []string{"x"}},
		{Name: "asyncrl_t_total", Kind: CounterAdd, Value: 1}, // missing label
	} {
		if err := s.Apply(bad); err == nil {
			t.Errorf("Apply(%+v) accepted", bad)
		}
	}
	if _, err := NewPromSink(nil, MetricDef{Name: "a", Kind: 0}); err == nil {
		t.Fatal("kind 0 accepted")
	}
	if _, err := NewPromSink(nil, MetricDef{Name: "a", Kind: GaugeSet}, MetricDef{Name: "a", Kind: GaugeSet}); err == nil {
		t.Fatal("duplicate accepted")
	}
}

func TestSystemsShareRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	for range 2 {
		cfg := DefaultSystemConfig()
		cfg.Registerer = reg
		sys, err := NewSystem(cfg)
		if err != nil {
			t.Fatalf("second system on one registry: %v", err)
		}
		if err := sys.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestZerologHandlerLevels(t *testing.T) {
	buf := &syncBuf{}
	h := &zerologHandler{log: zerolog.New(buf), min: zerolog.WarnLevel}
	lg := slog.New(h).With("system", "s1").WithGroup("g")
	lg.Info("chatter")
	lg.Warn("careful", "k", 1)
	out := buf.String()
	if strings.Contains(out, "chatter") {
		t.Fatalf("info leaked: %s", out)
	}
	if !strings.Contains(out, `"level":"warn","system":"s1","g.k":"1","message":"careful"`) {
		t.Fatalf("warn line: %s", out)
	}
}
