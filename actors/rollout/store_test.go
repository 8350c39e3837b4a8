package rollout

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/rollout/outcome"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// lossyStream is a real JetStream stream whose first acks are lost: the
// first lose stores land, but the store is answered with a timeout (what a
// rollout actor sees while the stream's leader server dies). broken fails
// every store without storing.
type lossyStream struct {
	transport.Stream
	lose   int32
	broken bool
	calls  atomic.Int32
}

var errLostAck = errors.New("nats: timeout")

func (s *lossyStream) PublishMsgID(ctx context.Context, subject, id string, data []byte) (uint64, error) {
	n := s.calls.Add(1)
	if s.broken {
		return 0, errLostAck
	}
	seq, err := s.Stream.(idPublisher).PublishMsgID(ctx, subject, id, data)
	if err == nil && n <= s.lose {
		return 0, errLostAck
	}
	return seq, err
}

func storeRig(t *testing.T, s *lossyStream) (*natsbus.Bus, Subjects, transport.Stream) {
	t.Helper()
	bus, err := natsbus.Connect(context.Background(), natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	subj := Subjects{Prompts: "asyncrl.r.prompts", Groups: "asyncrl.r.groups", Aborted: "asyncrl.r.aborted"}
	st, err := bus.Stream(context.Background(), transport.StreamConfig{Name: "groups-r", Subjects: []string{subj.Groups}, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Stream = st
	return bus, subj, st
}

// storeActor starts a rollout actor whose episodes finish at once and
// whose groups go to ls, retried every retry for storeFor; it is stopped
// at the end of the test.
func storeActor(t *testing.T, bus transport.Bus, subj Subjects, ls *lossyStream, retry, storeFor time.Duration) (*Actor, *reports) {
	t.Helper()
	g := gated{release: make(chan struct{})}
	close(g.release)
	rep := &reports{m: map[string]bool{}}
	a, err := Start(bus, g, Config{RunID: "r", Name: "rollout-0", Task: mustTask(t, "reverse"), Episode: testCfg(), Concurrency: 2,
		Subjects: subj, GroupStream: ls, StoreRetry: retry, StoreFor: storeFor, OnReport: rep.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	return a, rep
}

// reports records OnReport calls: group → ready, and how many calls.
type reports struct {
	mu    sync.Mutex
	m     map[string]bool
	calls int
}

func (r *reports) add(group string, ready bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[group] = ready
	r.calls++
}

func (r *reports) get(group string) (ready, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ready, ok = r.m[group]
	return ready, ok
}

func assign(t *testing.T, bus transport.Bus, subj Subjects, group string) {
	t.Helper()
	data, _ := messages.Encode(messages.PromptAssigned{Header: messages.Header{RunID: "r"}, PromptID: PromptID("p-"+group, 7),
		GroupID: group, Text: "rev ab=", NSamples: 2})
	if err := bus.Publish(context.Background(), subj.Prompts, data); err != nil {
		t.Fatal(err)
	}
}

// A store whose ack was lost is retried under the group's id: the buffer
// holds the group once, and the actor reports it ready.
func TestGroupStoreRetriedOnce(t *testing.T) {
	ls := &lossyStream{lose: 2}
	bus, subj, st := storeRig(t, ls)
	a, rep := storeActor(t, bus, subj, ls, 200*time.Millisecond, 10*time.Second)
	assign(t, bus, subj, "g1")
	deadline := time.Now().Add(10 * time.Second)
	for r, _ := rep.get("g1"); !r; r, _ = rep.get("g1") {
		if time.Now().After(deadline) {
			t.Fatalf("g1 not reported ready; stats %+v", a.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := a.Stats(); s.StoreRetries != 2 || s.GroupsUnstored != 0 || s.GroupsReady != 1 {
		t.Errorf("stats %+v; want 2 store retries, 1 group ready, none unstored", s)
	}
	// Three stores landed at JetStream under one id: one message.
	js, err := jetstream.New(bus.Conn())
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(context.Background(), st.Name())
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("the buffer holds g1 %d times; want once", n)
	}
}

// A group the buffer never takes is reported aborted once the retries are
// spent, so the controller requeues its prompt instead of holding its
// slot for good (the stall of issue 20).
func TestUnstoredGroupReportedAborted(t *testing.T) {
	ls := &lossyStream{broken: true}
	bus, subj, _ := storeRig(t, ls)
	aborted := make(chan messages.EpisodeAborted, 4)
	if _, err := bus.Subscribe(subj.Aborted, func(m *transport.Msg) {
		if ab, err := messages.DecodeAs[messages.EpisodeAborted](m.Data); err == nil {
			aborted <- ab
		}
	}); err != nil {
		t.Fatal(err)
	}
	a, rep := storeActor(t, bus, subj, ls, 50*time.Millisecond, 300*time.Millisecond)
	assign(t, bus, subj, "g1")
	select {
	case ab := <-aborted:
		if ab.GroupID != "g1" || ab.PromptID != PromptID("p-g1", 7) {
			t.Errorf("aborted %+v; want group g1", ab)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no abort for the unstored group; stats %+v", a.Stats())
	}
	if s := a.Stats(); s.GroupsUnstored != 1 || s.GroupsReady != 0 || ls.calls.Load() < 2 {
		t.Errorf("stats %+v after %d stores; want 1 unstored, none ready, retried", s, ls.calls.Load())
	}
	if r, ok := rep.get("g1"); !ok || r {
		t.Errorf("g1 reported %v (%v); want aborted", r, ok)
	}
}

// slowStream stores after a pause and records how many stores it held at
// once.
type slowStream struct {
	transport.Stream
	pause      time.Duration
	now, most  atomic.Int32
	storedOnce atomic.Int32
}

func (s *slowStream) PublishMsgID(ctx context.Context, subject, id string, data []byte) (uint64, error) {
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for {
		m := s.most.Load()
		if n <= m || s.most.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-time.After(s.pause):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	s.storedOnce.Add(1)
	return s.Stream.(idPublisher).PublishMsgID(ctx, subject, id, data)
}

// Groups finishing together queue for StoreConcurrency store slots
// instead of all waiting on the stream at once: the stream never holds
// more than the bound, every group is stored once, and none is retried.
func TestGroupStoresBounded(t *testing.T) {
	ls := &lossyStream{}
	bus, subj, _ := storeRig(t, ls)
	slow := &slowStream{Stream: ls.Stream, pause: 50 * time.Millisecond}
	g := gated{release: make(chan struct{})}
	close(g.release)
	a, err := Start(bus, g, Config{RunID: "r", Name: "rollout-0", Task: mustTask(t, "reverse"), Episode: testCfg(), Concurrency: 16,
		Subjects: subj, GroupStream: slow, StoreConcurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	const groups = 8
	for i := range groups {
		assign(t, bus, subj, "g"+string(rune('a'+i)))
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Stats().GroupsReady < groups {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v; want %d groups ready", a.Stats(), groups)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m := slow.most.Load(); m > 2 || m < 1 {
		t.Errorf("the stream held %d stores at once; want at most StoreConcurrency (2)", m)
	}
	if s := a.Stats(); s.StoreRetries != 0 || slow.storedOnce.Load() != groups {
		t.Errorf("stats %+v, %d stores; want %d stores and no retries", s, slow.storedOnce.Load(), groups)
	}
}

// Store retries are logged once per interval, not once each.
func TestStoreRetryWarningRateLimited(t *testing.T) {
	ls := &lossyStream{lose: 3}
	bus, subj, _ := storeRig(t, ls)
	var lines atomic.Int32
	log := zerolog.New(lineCounter(func(p []byte) {
		if strings.Contains(string(p), "trajectory buffer store failed") {
			lines.Add(1)
		}
	}))
	g := gated{release: make(chan struct{})}
	close(g.release)
	a, err := Start(bus, g, Config{RunID: "r", Name: "rollout-0", Task: mustTask(t, "reverse"), Episode: testCfg(), Concurrency: 2,
		Subjects: subj, GroupStream: ls, StoreRetry: 20 * time.Millisecond, StoreFor: 10 * time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(context.Background()) })
	assign(t, bus, subj, "g1")
	deadline := time.Now().Add(10 * time.Second)
	for a.Stats().GroupsReady < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("g1 not stored; stats %+v", a.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := a.Stats(); s.StoreRetries != 3 || lines.Load() != 1 {
		t.Fatalf("%d retries, %d warnings; want 3 retries, 1 warning", s.StoreRetries, lines.Load())
	}
}

type lineCounter func([]byte)

func (f lineCounter) Write(p []byte) (int, error) { f(p); return len(p), nil }

// An actor started without a store schedule takes the outcome core's
// (the numbers the simulator's rollouts use too).
func TestStoreScheduleDefaultsAreTheOutcomeCores(t *testing.T) {
	ls := &lossyStream{}
	bus, subj, _ := storeRig(t, ls)
	a, _ := storeActor(t, bus, subj, ls, 0, 0)
	if a.cfg.StoreRetry != outcome.DefaultStoreRetry || a.cfg.StoreFor != outcome.DefaultStoreFor {
		t.Fatalf("StoreRetry %v, StoreFor %v; want outcome's %v, %v", a.cfg.StoreRetry, a.cfg.StoreFor, outcome.DefaultStoreRetry, outcome.DefaultStoreFor)
	}
}
