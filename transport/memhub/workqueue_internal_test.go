package memhub

import (
	"context"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/transport"
)

// held is what the named stream stores now.
func (h *Hub) held(name string) (msgs int, bytes int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.streams[name]
	return len(st.msgs), st.bytes
}

// A work-queue stream deletes what its consumer acked (in stream order),
// where a limits stream keeps it until MaxAge.
func TestWorkQueueDeletesAcked(t *testing.T) {
	h := New(1)
	h.SetAuto(true)
	stop := h.RunRealtime(time.Millisecond)
	defer stop()
	b := h.Connect("n")
	defer b.Close()
	ctx := context.Background()
	for _, wq := range []bool{false, true} {
		name := map[bool]string{false: "LIMITS", true: "WQ"}[wq]
		subj := "asyncrl.r." + map[bool]string{false: "lim", true: "wq"}[wq]
		st, err := b.Stream(ctx, transport.StreamConfig{Name: name, Subjects: []string{subj}, MaxAge: time.Hour, WorkQueue: wq})
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			if _, err := st.Publish(ctx, subj, []byte("group")); err != nil {
				t.Fatal(err)
			}
		}
		acked := make(chan uint64, 8)
		if _, err := st.Consume(ctx, "sampling", time.Hour, func(m *transport.StreamMsg) {
			if m.Sequence != 4 { // the last stays unacked
				_ = m.Ack()
			}
			acked <- m.Sequence
		}); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			select {
			case <-acked:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: deliveries missing", name)
			}
		}
		n, bytes := h.held(name)
		want := map[bool]int{false: 4, true: 1}[wq]
		if n != want || bytes != int64(5*want) {
			t.Errorf("%s holds %d messages (%d bytes) after 3 of 4 acked; want %d", name, n, bytes, want)
		}
	}
}
