package ledger_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// LeaderAnswers is bounded by its within while the prompt bucket's stream
// has no leader (its leader's server died): it says so in about a second
// instead of waiting out nats.go's 5 s, and answers nil once the
// survivors elected one, after which the ledger reads and writes.
func TestLeaderAnswersIsBoundedThroughAnElection(t *testing.T) {
	if testing.Short() {
		t.Skip("clustered JetStream takes seconds to form")
	}
	buses := startCluster(t)
	ctx := context.Background()
	open := func(i int) *ledger.Ledger {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			cfg := ledger.DefaultConfig("run1")
			cfg.Replicas = 3
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			l, err := ledger.Open(cctx, buses[i].Conn(), cfg)
			cancel()
			if err == nil {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("open replicated ledger on node-%d: %v", i, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	first := open(0)
	if err := first.LeaderAnswers(ctx, time.Second); err != nil {
		t.Fatalf("a healthy ledger: %v", err)
	}
	mustRecord(t, first, rec("p0", messages.LedgerConsumed, 0))

	// The server that leads the prompt bucket's stream dies.
	js, err := jetstream.New(buses[0].Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "KV_"+transport.MustPlan("run1").PromptsBucket)
	if err != nil {
		t.Fatal(err)
	}
	c := s.CachedInfo().Cluster
	if c == nil {
		t.Fatal("the prompt bucket's stream has no cluster info on a three-server cluster")
	}
	leaderName := c.Leader
	if !strings.HasPrefix(leaderName, "node-") || len(leaderName) != len("node-0") || leaderName[5] < '0' || leaderName[5] > '2' {
		t.Fatalf("leader %q is none of node-0..2", leaderName)
	}
	victim := int(leaderName[5] - '0')
	survivor := (victim + 1) % 3
	l := open(survivor)
	buses[victim].Close()

	const within = time.Second
	deadline := time.Now().Add(30 * time.Second)
	asks, unanswered := 0, 0
	for {
		start := time.Now()
		err := l.LeaderAnswers(ctx, within)
		took := time.Since(start)
		asks++
		if took > 3*within {
			t.Fatalf("ask %d took %v with a bound of %v (nats.go's own default is 5 s)", asks, took, within)
		}
		if err == nil {
			break
		}
		unanswered++
		if time.Now().After(deadline) {
			t.Fatalf("no leader answered in 30 s after %s died: %v", leaderName, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s died; %d of %d asks unanswered before a new leader answered", leaderName, unanswered, asks)
	mustRecord(t, l, rec("p0", messages.LedgerRequeued, 0))
	es, err := l.Entries(ctx)
	if err != nil || len(es) != 1 || es[0].State != messages.LedgerRequeued {
		t.Fatalf("after the election: %v, %+v", err, es)
	}
}
