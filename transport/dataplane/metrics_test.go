package dataplane_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
	"github.com/asyncrl/asyncrl/transport/dataplane/tcp"
)

func TestInstrumentCountsFetches(t *testing.T) {
	reg := prometheus.NewRegistry()
	raw, err := tcp.New(tcp.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	b, err := dataplane.Instrument(raw, reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dataplane.Instrument(raw, reg); err != nil {
		t.Fatalf("second Instrument on the same registry: %v", err)
	}
	src := make(dataplane.Buffer, 3<<20)
	for i := range src {
		src[i] = byte(i)
	}
	p := &messages.TransferPlan{TransferID: "m", Ranges: dataplane.SplitRanges("w", int64(len(src)), 1<<20)}
	dataplane.Checksum(src, p.Ranges, dataplane.XXH3)
	o, err := b.Publish(context.Background(), p, src)
	if err != nil {
		t.Fatal(err)
	}
	p.URI = o.URI()
	if _, err := b.Fetch(context.Background(), p, make(dataplane.Buffer, len(src))); err != nil {
		t.Fatal(err)
	}
	// A plan whose first checksum does not match (the source must not
	// change bytes while they are published).
	bad := *p
	bad.Ranges = append([]messages.ByteRange(nil), p.Ranges...)
	bad.Ranges[0].Checksum = dataplane.Sum(dataplane.XXH3, []byte("other bytes"))
	if _, err := b.Fetch(context.Background(), &bad, make(dataplane.Buffer, len(src))); err == nil {
		t.Fatal("corrupted fetch succeeded")
	}
	want := `
# HELP asyncrl_dataplane_fetches_total Data-plane fetches by backend and outcome.
# TYPE asyncrl_dataplane_fetches_total counter
asyncrl_dataplane_fetches_total{backend="tcp",outcome="checksum"} 1
asyncrl_dataplane_fetches_total{backend="tcp",outcome="ok"} 1
# HELP asyncrl_dataplane_offers_open Published transfers whose Offer is not closed yet.
# TYPE asyncrl_dataplane_offers_open gauge
asyncrl_dataplane_offers_open{backend="tcp"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "asyncrl_dataplane_fetches_total", "asyncrl_dataplane_offers_open"); err != nil {
		t.Fatal(err)
	}
	// The failed fetch may have received other ranges before range 0 failed.
	if got := gathered(t, reg, "asyncrl_dataplane_fetch_bytes_total"); got < float64(len(src)) || got > 2*float64(len(src)) {
		t.Fatalf("fetch bytes %v, want the first fetch's %d plus at most as much again", got, len(src))
	}
	o.Close()
	o.Close()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP asyncrl_dataplane_offers_open Published transfers whose Offer is not closed yet.
# TYPE asyncrl_dataplane_offers_open gauge
asyncrl_dataplane_offers_open{backend="tcp"} 0
`), "asyncrl_dataplane_offers_open"); err != nil {
		t.Fatal(err)
	}
}

// gathered returns the value of the single series of counter name.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s not gathered", name)
	return 0
}

func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{&dataplane.RangeError{Err: dataplane.ErrChecksum}, "checksum"},
		{dataplane.ErrIncomplete, "incomplete"},
		{dataplane.ErrUnknownTransfer, "unknown_transfer"},
		{dataplane.ErrBadPlan, "bad_plan"},
		{dataplane.ErrUnavailable, "unavailable"},
		{dataplane.ErrNotImplemented, "not_implemented"},
		{context.Canceled, "error"},
	} {
		if got := dataplane.Outcome(tc.err); got != tc.want {
			t.Errorf("Outcome(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
}
