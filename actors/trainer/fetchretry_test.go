package trainer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/trainer/microbatch"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// flakyReader is a real JetStream trajectory buffer whose first fail
// reads answer err instead, as a stream without a leader answers while
// its replicas elect one.
type flakyReader struct {
	transport.StoredReader
	fail  int32
	err   error
	calls atomic.Int32
}

func (f *flakyReader) GetMsg(ctx context.Context, seq uint64) (transport.StoredMsg, error) {
	if f.calls.Add(1) <= f.fail {
		return transport.StoredMsg{}, f.err
	}
	return f.StoredReader.GetMsg(ctx, seq)
}

// errJetStream503 is what natsbus returns for JetStream's 503 (mapErr).
var errJetStream503 = fmt.Errorf("natsbus: stream groups-r get seq 1: %w: nats: API error: code=503 err_code=10008 description=JetStream system temporarily unavailable", transport.ErrUnavailable)

// realBuffer is a trajectory buffer on a real embedded JetStream, its
// subject and its bus.
func realBuffer(t *testing.T) (transport.Stream, string, *natsbus.Bus) {
	t.Helper()
	ctx := context.Background()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	const subject = "asyncrl.r.trajectories"
	st, err := bus.Stream(ctx, transport.StreamConfig{Name: "groups-r", Subjects: []string{subject}, Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	return st, subject, bus
}

// TestFetchRetriesTransientBufferErrors: a fetch the buffer answers
// "temporarily unavailable" (or times out) three times is tried again and
// returns the stored batch; each retry is reported. Before the retry the
// first such answer failed the step, and in a cluster the whole term.
func TestFetchRetriesTransientBufferErrors(t *testing.T) {
	for _, cause := range []error{errJetStream503, fmt.Errorf("natsbus: get: %w: context deadline exceeded", transport.ErrTimeout)} {
		st, subject, _ := realBuffer(t)
		ref := storeGroup(t, st, subject, "g1", 1, 0)
		f := &flakyReader{StoredReader: st.(transport.StoredReader), fail: 3, err: cause}
		var retries []int
		src := StreamSource{Stream: f, Name: st.Name(), RetryFor: 10 * time.Second,
			OnRetry: func(group string, try int, err error) {
				if group == "g1" && errors.Is(err, cause) {
					retries = append(retries, try)
				}
			}}
		data, err := src.Fetch(context.Background(), "g1", ref.Batch)
		if err != nil {
			t.Fatalf("fetch after 3 × %v: %v; want the batch", cause, err)
		}
		tb, err := messages.DecodeTokenBatch(data)
		if err != nil || tb.Len() != 2 {
			t.Fatalf("fetched batch: %v trajectories, err %v; want the 2 stored", tb, err)
		}
		if f.calls.Load() != 4 || fmt.Sprint(retries) != "[1 2 3]" {
			t.Fatalf("%d reads, retries reported %v; want 4 reads and tries [1 2 3] reported", f.calls.Load(), retries)
		}
	}
}

// TestFetchDoesNotRetryLastingErrors: a deleted message (ErrBatchMissing)
// and a closed bus are read once; a buffer unavailable past RetryFor
// fails the fetch with the cause and how often it was tried; a cancelled
// context ends the retries.
func TestFetchDoesNotRetryLastingErrors(t *testing.T) {
	st, subject, _ := realBuffer(t)
	ref := storeGroup(t, st, subject, "g1", 1, 0)
	sr := st.(transport.StoredReader)
	if err := sr.DeleteMsg(context.Background(), ref.Batch.Seq); err != nil {
		t.Fatal(err)
	}
	f := &flakyReader{StoredReader: sr}
	if _, err := (StreamSource{Stream: f, Name: "groups-r"}).Fetch(context.Background(), "g1", ref.Batch); !errors.Is(err, ErrBatchMissing) || f.calls.Load() != 1 {
		t.Fatalf("deleted message: err %v after %d reads; want ErrBatchMissing after 1", err, f.calls.Load())
	}
	closed := &flakyReader{StoredReader: sr, fail: 1 << 30, err: transport.ErrClosed}
	if _, err := (StreamSource{Stream: closed, Name: "groups-r"}).Fetch(context.Background(), "g1", ref.Batch); !errors.Is(err, transport.ErrClosed) || closed.calls.Load() != 1 {
		t.Fatalf("closed bus: err %v after %d reads; want ErrClosed after 1", err, closed.calls.Load())
	}

	ref2 := storeGroup(t, st, subject, "g2", 1, 0)
	down := &flakyReader{StoredReader: sr, fail: 1 << 30, err: errJetStream503}
	_, err := (StreamSource{Stream: down, Name: "groups-r", RetryFor: 700 * time.Millisecond}).Fetch(context.Background(), "g2", ref2.Batch)
	if !errors.Is(err, transport.ErrUnavailable) || !strings.Contains(err.Error(), "tried ") || down.calls.Load() < 3 {
		t.Fatalf("buffer down past RetryFor: err %v after %d reads; want ErrUnavailable, the tries named, ≥ 3 reads", err, down.calls.Load())
	}

	once := &flakyReader{StoredReader: sr, fail: 1 << 30, err: errJetStream503}
	if _, err := (StreamSource{Stream: once, Name: "groups-r", RetryFor: -1}).Fetch(context.Background(), "g2", ref2.Batch); err == nil || once.calls.Load() != 1 ||
		!strings.Contains(err.Error(), "tried 1 times over ") || strings.Contains(err.Error(), "over -") {
		t.Fatalf("RetryFor < 0: err %v after %d reads; want an error after 1 naming one try over the time it took", err, once.calls.Load())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cut := &flakyReader{StoredReader: sr, fail: 1 << 30, err: errJetStream503}
	src := StreamSource{Stream: cut, Name: "groups-r", RetryFor: time.Hour, OnRetry: func(string, int, error) { cancel() }}
	done := make(chan error, 1)
	go func() { _, err := src.Fetch(ctx, "g2", ref2.Batch); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrUnavailable) || !errors.Is(err, context.Canceled) || cut.calls.Load() != 1 {
			t.Fatalf("cancelled during the wait: err %v after %d reads; want the try's error and the context's cause after 1", err, cut.calls.Load())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a cancelled fetch kept retrying")
	}
}

// TestFetchRetriesTransientBind: a trainer that binds its buffer at the
// first stored reference (StreamSource.Bind, the remote worker's) tries a
// bind the buffer fails transiently again on the fetch rule's schedule,
// then reads; the bind shares the window with the reads (a buffer whose
// bind keeps failing gives up within RetryFor, naming the tries); a bind
// that fails for good (the stream does not exist) is tried once.
func TestFetchRetriesTransientBind(t *testing.T) {
	st, subject, _ := realBuffer(t)
	ref := storeGroup(t, st, subject, "g1", 1, 0)
	sr := st.(transport.StoredReader)

	var binds atomic.Int32
	var retries []int
	flakyBind := func(fail int32, err error) func(context.Context) (transport.StoredReader, error) {
		return func(context.Context) (transport.StoredReader, error) {
			if binds.Add(1) <= fail {
				return nil, err
			}
			return sr, nil
		}
	}
	src := StreamSource{Bind: flakyBind(2, errJetStream503), Name: st.Name(), RetryFor: 10 * time.Second,
		OnRetry: func(group string, try int, err error) { retries = append(retries, try) }}
	data, err := src.Fetch(context.Background(), "g1", ref.Batch)
	if err != nil {
		t.Fatalf("fetch after 2 unavailable binds: %v; want the batch", err)
	}
	if tb, err := messages.DecodeTokenBatch(data); err != nil || tb.Len() != 2 {
		t.Fatalf("fetched batch: %v, err %v; want the 2 stored trajectories", tb, err)
	}
	if binds.Load() != 3 || fmt.Sprint(retries) != "[1 2]" {
		t.Fatalf("%d binds, retries %v; want 3 binds and tries [1 2] reported", binds.Load(), retries)
	}

	binds.Store(0)
	began := time.Now()
	_, err = (StreamSource{Bind: flakyBind(1<<30, errJetStream503), Name: st.Name(), RetryFor: 700 * time.Millisecond}).Fetch(context.Background(), "g1", ref.Batch)
	if !errors.Is(err, transport.ErrUnavailable) || !strings.Contains(err.Error(), "tried ") || binds.Load() < 3 {
		t.Fatalf("bind unavailable past RetryFor: err %v after %d binds; want ErrUnavailable, the tries named, ≥ 3 binds", err, binds.Load())
	}
	if time.Since(began) < 300*time.Millisecond {
		t.Fatalf("gave up after %v: the rule waits 100+200 ms before a third try", time.Since(began))
	}

	binds.Store(0)
	gone := fmt.Errorf("natsbus: bind stream groups-x: %w", errors.New("nats: stream not found"))
	if _, err := (StreamSource{Bind: flakyBind(1<<30, gone), Name: "groups-x"}).Fetch(context.Background(), "g1", ref.Batch); !errors.Is(err, gone) || binds.Load() != 1 {
		t.Fatalf("missing stream: err %v after %d binds; want it after 1", err, binds.Load())
	}
}

// TestLogFetchRetriesIsLimited: an outage's retries (17 tries of a group
// in 30 s) log one warning, not one per try; the limit holds across the
// fetches of one trainer's logger.
func TestLogFetchRetriesIsLimited(t *testing.T) {
	var buf bytes.Buffer
	onRetry := LogFetchRetries(zerolog.New(&buf))
	for try := 1; try <= 17; try++ {
		onRetry("g1", try, errJetStream503)
	}
	onRetry("g2", 1, errJetStream503)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], `"group":"g1"`) || !strings.Contains(lines[0], `"try":1`) {
		t.Fatalf("logged %d lines %q; want the first try's only", len(lines), lines)
	}
}

// TestStopDuringFetchWaitIsNoFailure: a trainer stopped while its fetch
// waits on a buffer that keeps answering "temporarily unavailable" ends
// the step with an error that is the context's cancel as well as the
// buffer's (errors.Is both), and logs it as a step cut short by the stop
// (info), not as a failed step (error).
func TestStopDuringFetchWaitIsNoFailure(t *testing.T) {
	st, subject, bus := realBuffer(t)
	ref := storeGroup(t, st, subject, "g1", 1, 0)
	down := &flakyReader{StoredReader: st.(transport.StoredReader), fail: 1 << 30, err: errJetStream503}
	var logs syncbuf.Buffer
	m, _ := model.New(model.DefaultConfig(), 1)
	ptr, _ := model.NewTrainer(m, model.DefaultTrainerConfig())
	a, err := Start(bus, ptr, &recordingPublisher{}, Config{RunID: "r", Name: "t", NormStd: true, Microbatch: microbatch.DefaultConfig(),
		Subjects: Subjects{Train: "T", Steps: "S"}, Logger: zerolog.New(&logs),
		Batches: StreamSource{Stream: down, Name: st.Name(), RetryFor: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := messages.Encode(messages.TrainBatch{Header: messages.Header{RunID: "r"}, Step: 1, Groups: []messages.GroupRef{ref}, GroupIDs: []string{"g1"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Publish(context.Background(), "T", data); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for down.calls.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the trainer never retried its fetch")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	err = a.Err()
	if !errors.Is(err, context.Canceled) || !errors.Is(err, transport.ErrUnavailable) {
		t.Fatalf("Err after a stop during the wait: %v; want the cancel and the buffer's error", err)
	}
	if out := logs.String(); !strings.Contains(out, "cut short: the trainer is stopping") || strings.Contains(out, "training step failed") {
		t.Fatalf("log:\n%s\nwant the step cut short (info), no failed step", out)
	}
}
