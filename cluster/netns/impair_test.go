package netns

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// These tests need no namespaces: they run in `make test` too.

func TestParseNetem(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want Impairment
	}{
		{"loss 5% delay 50ms", Impairment{Loss: 0.05, Delay: 50 * time.Millisecond}},
		{"delay 50ms 10ms loss 0.5%", Impairment{Loss: 0.005, Delay: 50 * time.Millisecond, Jitter: 10 * time.Millisecond}},
		{"delay 20msec", Impairment{Delay: 20 * time.Millisecond}},
		{"loss 100%", Impairment{Loss: 1}},
	} {
		got, err := ParseNetem(tc.spec)
		if err != nil || got != tc.want {
			t.Errorf("ParseNetem(%q) = %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
		if back, err := ParseNetem(got.String()); err != nil || back != got {
			t.Errorf("ParseNetem(%q.String() = %q) = %+v, %v", tc.spec, got.String(), back, err)
		}
	}
	for _, bad := range []string{"", "loss", "loss 5", "loss 120%", "delay", "delay -5ms", "delay 5ms 10ms",
		"rate 1mbit", "loss 5% loss 5%", "delay 50ms reorder 25%", "loss 5% 25%"} {
		if _, err := ParseNetem(bad); !errors.Is(err, ErrBadNetem) {
			t.Errorf("ParseNetem(%q): %v, want ErrBadNetem", bad, err)
		}
	}
}

// offerAll offers n packets 1 ms apart from t0 and returns how many were
// dropped and each kept packet's release time.
func offerAll(l *Link, t0 time.Time, n int) (dropped int, releases []time.Time) {
	for i := range n {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		at, d := l.Offer(now, []byte{byte(i)})
		if d {
			dropped++
			continue
		}
		if at.Before(now) {
			panic("released before it arrived")
		}
		releases = append(releases, at)
	}
	return dropped, releases
}

// TestLinkLossRate: over 100 000 packets the dropped share is within 5
// standard deviations of Loss, for several seeds and rates; 0 drops none
// and 1 drops all.
func TestLinkLossRate(t *testing.T) {
	const n = 100_000
	t0 := time.Unix(1000, 0)
	for _, p := range []float64{0, 0.05, 0.3, 1} {
		for seed := range uint64(3) {
			l := NewLink(Impairment{Loss: p}, rand.New(rand.NewPCG(seed, 7)))
			dropped, _ := offerAll(l, t0, n)
			sd := math.Sqrt(n * p * (1 - p))
			if math.Abs(float64(dropped)-n*p) > 5*sd {
				t.Errorf("loss %g seed %d: dropped %d of %d, want %g ± %.0f", p, seed, dropped, n, n*p, 5*sd)
			}
			if l.Offered != n || l.Dropped != dropped {
				t.Errorf("counters %d/%d, want %d/%d", l.Dropped, l.Offered, dropped, n)
			}
		}
	}
}

// TestLinkDelay: a fixed delay releases each packet exactly Delay after it
// arrived; Due hands back nothing early, everything due in arrival order.
func TestLinkDelay(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := 50 * time.Millisecond
	l := NewLink(Impairment{Delay: d}, rand.New(rand.NewPCG(1, 2)))
	_, rel := offerAll(l, t0, 100)
	for i, at := range rel {
		if want := t0.Add(time.Duration(i)*time.Millisecond + d); !at.Equal(want) {
			t.Fatalf("packet %d released at %v, want %v", i, at.Sub(t0), want.Sub(t0))
		}
	}
	if next, ok := l.Next(); !ok || !next.Equal(t0.Add(d)) {
		t.Fatalf("Next = %v %v, want %v", next.Sub(t0), ok, d)
	}
	if got := l.Due(t0.Add(d - time.Nanosecond)); len(got) != 0 {
		t.Fatalf("%d packets due before the delay passed", len(got))
	}
	got := l.Due(t0.Add(d + 9*time.Millisecond))
	if len(got) != 10 || l.Held() != 90 {
		t.Fatalf("due after delay+9ms: %d (held %d), want 10 (held 90)", len(got), l.Held())
	}
	for i, p := range got {
		if p[0] != byte(i) {
			t.Fatalf("packet %d out of order: %d", i, p[0])
		}
	}
	if rest := l.Due(t0.Add(time.Hour)); len(rest) != 90 || rest[0][0] != 10 || l.Held() != 0 {
		t.Fatalf("the rest: %d from %d, held %d", len(rest), rest[0][0], l.Held())
	}
	if _, ok := l.Next(); ok {
		t.Fatal("Next with nothing held")
	}
}

// TestLinkJitter: with jitter every packet is held between Delay-Jitter
// and Delay+Jitter (or until the packet before it left: no reordering),
// the spread is used, and release times never go backwards.
func TestLinkJitter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	im := Impairment{Delay: 50 * time.Millisecond, Jitter: 20 * time.Millisecond}
	l := NewLink(im, rand.New(rand.NewPCG(3, 4)))
	// Packets 50 ms apart cannot be held behind one another.
	var lo, hi time.Duration = time.Hour, 0
	for i := range 2000 {
		now := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		at, _ := l.Offer(now, nil)
		held := at.Sub(now)
		if held < im.Delay-im.Jitter || held > im.Delay+im.Jitter {
			t.Fatalf("packet %d held %v, outside %v ± %v", i, held, im.Delay, im.Jitter)
		}
		lo, hi = min(lo, held), max(hi, held)
	}
	if lo > 32*time.Millisecond || hi < 68*time.Millisecond {
		t.Errorf("jitter spread %v..%v, want close to 30ms..70ms", lo, hi)
	}
	// Back to back, a later packet is never released before an earlier one.
	_, rel := offerAll(NewLink(im, rand.New(rand.NewPCG(5, 6))), t0, 2000)
	for i := 1; i < len(rel); i++ {
		if rel[i].Before(rel[i-1]) {
			t.Fatalf("packet released at %v before the one before it (%v)", rel[i].Sub(t0), rel[i-1].Sub(t0))
		}
	}
}

// TestLinkSeedReplays: the same seed makes the same decisions; another
// seed different ones.
func TestLinkSeedReplays(t *testing.T) {
	im := Impairment{Loss: 0.2, Delay: 10 * time.Millisecond, Jitter: 5 * time.Millisecond}
	run := func(seed uint64) []time.Time {
		_, rel := offerAll(NewLink(im, rand.New(rand.NewPCG(seed, 0))), time.Unix(0, 0), 1000)
		return rel
	}
	a, b, c := run(9), run(9), run(10)
	if len(a) != len(b) {
		t.Fatalf("same seed kept %d then %d packets", len(a), len(b))
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			t.Fatalf("same seed, packet %d released at %v then %v", i, a[i], b[i])
		}
	}
	same := len(a) == len(c)
	for i := 0; same && i < len(a); i++ {
		same = a[i].Equal(c[i])
	}
	if same {
		t.Fatal("seeds 9 and 10 made identical decisions")
	}
}

// TestNetemRefusesBeforeTouchingLinks: an unknown mode, or a spec the
// userspace impairer cannot apply, is an error before anything is made
// (no namespaces needed: the net here has none).
func TestNetemRefusesBeforeTouchingLinks(t *testing.T) {
	n := &Net{}
	if _, err := n.Netem("loss 5%", NetemOptions{Mode: "fast"}); err == nil || !strings.Contains(err.Error(), `"fast"`) {
		t.Errorf("mode fast: %v, want an error naming it", err)
	}
	if _, err := n.Netem("rate 1mbit", NetemOptions{Mode: NetemUserspace}); !errors.Is(err, ErrBadNetem) {
		t.Errorf("rate under the userspace impairer: %v, want ErrBadNetem", err)
	}
	if n.imp != nil || n.shaped {
		t.Error("a refused Netem left the net shaped")
	}
}
