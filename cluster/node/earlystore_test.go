package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/transport/natsbus/natstest"
)

// In a cluster term each attempt to make a stream or bucket first finds
// JetStream's meta leader, then has clusterAttemptWait (short: a create
// sent again once the new stream elected its leader is answered at once,
// while an answer lost in the election never comes), and a failed
// attempt is tried again with a fresh bound until the window ends, which
// bounds the last attempt too. A closed bus ends the tries at once.
// Outside a cluster f runs once with the caller's context.
func TestClusterRetryTriesShortAndAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{opts: Options{Remote: &RemoteEngines{}}, bus: bus}
	var bounds []time.Duration
	err = n.clusterRetry(ctx, func(ctx context.Context) error {
		dl, ok := ctx.Deadline()
		if !ok {
			t.Fatal("an attempt's context has no deadline: a request lost in an election would wait for ever")
		}
		bounds = append(bounds, time.Until(dl))
		if len(bounds) < 2 {
			return errors.New("JetStream system temporarily unavailable")
		}
		return nil
	})
	if err != nil || len(bounds) != 2 {
		t.Fatalf("err %v after %d attempts, want success on the second", err, len(bounds))
	}
	for i, b := range bounds {
		if b <= clusterAttemptWait/2 || b > clusterAttemptWait {
			t.Errorf("attempt %d may wait %v, want about clusterAttemptWait (%v)", i+1, b, clusterAttemptWait)
		}
	}
	// Tries that keep failing stop with the window, the last one included.
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	start := time.Now()
	tries := 0
	err = n.clusterRetry(wctx, func(ctx context.Context) error {
		tries++
		<-ctx.Done() // an answer that never comes
		return ctx.Err()
	})
	if err == nil || tries < 2 || time.Since(start) > 3*time.Second+clusterAttemptWait {
		t.Fatalf("unanswered tries: %d in %v, err %v; want ≥ 2, ended with the caller's 3 s", tries, time.Since(start), err)
	}
	bus.Close()
	calls := 0
	start = time.Now()
	err = n.clusterRetry(ctx, func(context.Context) error { calls++; return nil })
	if !errors.Is(err, transport.ErrClosed) || calls != 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("closed bus: err %v, %d calls, after %v; want ErrClosed at once and no call", err, calls, time.Since(start))
	}
	local := &Node{}
	parent, pcancel := context.WithCancel(context.Background())
	defer pcancel()
	err = local.clusterRetry(parent, func(ctx context.Context) error {
		calls++
		if ctx != parent {
			t.Error("outside a cluster the attempt does not get the caller's context")
		}
		return errors.New("refused")
	})
	if err == nil || calls != 1 {
		t.Fatalf("outside a cluster: %d calls, err %v; want one call and its error", calls, err)
	}
}

// A cluster term opens its weight bucket while it makes its streams: once
// startBus returned the open is under way (or done), weightSyncMode's
// store is that bucket, replicated as the term's streams are; a start
// that fails before it takes the store has Stop wait for the open.
func TestClusterTermOpensItsBucketWithItsStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-server NATS cluster")
	}
	buses := natstest.Cluster(t, 3)
	newTerm := func(t *testing.T, id string) *Node {
		t.Helper()
		cfg := config.Default()
		cfg.Run.ID, cfg.Run.DataDir, cfg.Run.ReportDir = id, t.TempDir(), t.TempDir()
		cfg.Bus.NATSURL = buses[0].ClientURL()
		cfg.Publisher.Mode, cfg.Publisher.Store, cfg.Publisher.Transport = config.PublishDelta, config.StoreNATS, config.TransportStore
		n, err := New(cfg, Options{Remote: &RemoteEngines{BaseRun: "run", Replicas: 3}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Stop)
		return n
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	n := newTerm(t, "run-t1")
	t0 := time.Now()
	if err := n.startBus(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("streams made in %v on a cluster just started", time.Since(t0))
	if n.early == nil {
		t.Fatal("the term's bucket was not being opened when its streams were made")
	}
	st, err := n.weightStore(ctx)
	if err != nil || st == nil {
		t.Fatalf("the early store: %v", err)
	}
	if n.early != nil {
		t.Error("the early store is still pending after weightSyncMode took it")
	}
	js, err := jetstream.New(buses[1].Conn())
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, n.subj.WeightsBucket)
	if err != nil {
		t.Fatalf("bucket %s: %v", n.subj.WeightsBucket, err)
	}
	status, err := obs.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if status.Replicas() != 3 {
		t.Errorf("the term's bucket has %d copies, want the term's 3", status.Replicas())
	}
	if err := st.Put(ctx, "probe", strings.NewReader("v0"), 2); err != nil {
		t.Fatalf("the store taken from the early open does not take a write: %v", err)
	}

	// A start that fails after startBus: Stop waits for the open.
	m := newTerm(t, "run-t2")
	if err := m.startBus(ctx); err != nil {
		t.Fatal(err)
	}
	p := m.early
	if p == nil {
		t.Fatal("the second term's bucket was not being opened")
	}
	m.Stop()
	select {
	case <-p.done:
	default:
		t.Fatal("Stop returned with the bucket's open still running")
	}
}
