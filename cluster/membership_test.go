package cluster

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// memberlist's probe of a node that just died waits out its timeout even
// after Shutdown (it holds no resource and returns within ProbeTimeout).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestTwoNodesSeeEachOtherAndLeave(t *testing.T) {
	var mu sync.Mutex
	left := map[string]bool{}
	a := DefaultMembershipConfig("node-a")
	a.Meta = NodeMeta{Roles: []string{"trainer"}, Endpoints: map[string]string{"metrics": "127.0.0.1:9100"}}
	a.OnLeave = func(m Member) { mu.Lock(); left[m.Name] = true; mu.Unlock() }
	ma, err := JoinCluster(a, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer ma.Leave(time.Second)

	b := DefaultMembershipConfig("node-b")
	b.Meta = NodeMeta{Roles: []string{"engine"}, GPUs: 0, Endpoints: map[string]string{"engine": "http://127.0.0.1:8001"}}
	b.Join = []string{ma.Addr()}
	mb, err := JoinCluster(b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a sees b", func() bool { return len(ma.Members()) == 2 })
	got := ma.Members()
	if got[1].Name != "node-b" || got[1].Meta.Endpoints["engine"] != "http://127.0.0.1:8001" || got[1].Meta.Roles[0] != "engine" {
		t.Fatalf("a's view of b = %+v", got[1])
	}
	if err := mb.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a notices b left", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return left["node-b"] && len(ma.Members()) == 1
	})
}

func TestBadConfig(t *testing.T) {
	if _, err := JoinCluster(MembershipConfig{}, zerolog.Nop()); !errors.Is(err, ErrBadMembershipConfig) {
		t.Fatalf("empty name: err = %v, want ErrBadMembershipConfig", err)
	}
	cfg := DefaultMembershipConfig("big")
	cfg.Meta.Endpoints = map[string]string{}
	for i := 0; i < 40; i++ {
		cfg.Meta.Endpoints[string(rune('a'+i%26))+string(rune('a'+i/26))] = "http://127.0.0.1:65535/some/long/path"
	}
	if _, err := JoinCluster(cfg, zerolog.Nop()); !errors.Is(err, ErrBadMembershipConfig) {
		t.Fatalf("oversized meta: err = %v, want ErrBadMembershipConfig", err)
	}
	j := DefaultMembershipConfig("lonely")
	j.Join = []string{"127.0.0.1:1"}
	if _, err := JoinCluster(j, zerolog.Nop()); err == nil {
		t.Fatal("joining a dead address succeeded")
	}
}

// A crashed node (gossip stopped, nobody told) is declared dead by the
// others' failure detection; Leave afterwards is a no-op.
func TestCrashIsDetectedAsDeath(t *testing.T) {
	var mu sync.Mutex
	left := map[string]bool{}
	a := DefaultMembershipConfig("node-a")
	a.OnLeave = func(m Member) { mu.Lock(); left[m.Name] = true; mu.Unlock() }
	ma, err := JoinCluster(a, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer ma.Leave(time.Second)
	b := DefaultMembershipConfig("node-b")
	b.Join = []string{ma.Addr()}
	mb, err := JoinCluster(b, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a sees b", func() bool { return len(ma.Members()) == 2 })
	if err := mb.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := mb.Leave(time.Second); err != nil {
		t.Fatalf("Leave after Crash: %v", err)
	}
	waitFor(t, "a declares b dead", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return left["node-b"] && len(ma.Members()) == 1
	})
}
