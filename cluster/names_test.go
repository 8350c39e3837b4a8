package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

func TestClaimNameRefusesASecondLiveNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// A TTL far above any scheduling delay: a reclaim that took the TTL
	// waited for expiry (the resign failed), one under it did not.
	ttl := 2 * time.Second
	g1, err := ClaimName(ctx, b.Conn(), NameClaim{Name: "node.1", Instance: "host-a:100", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ClaimName(ctx, b.Conn(), NameClaim{Name: "node.1", Instance: "host-b:200", TTL: ttl})
	if !errors.Is(err, ErrNameInUse) || !strings.Contains(err.Error(), `"node.1"`) || !strings.Contains(err.Error(), "host-a:100") {
		t.Fatalf("duplicate name: %v, want ErrNameInUse naming the name and the holder", err)
	}
	if !g1.Held() {
		t.Fatal("the first node lost its name to the duplicate")
	}
	// Another name is free.
	g2, err := ClaimName(ctx, b.Conn(), NameClaim{Name: "node-2", Instance: "host-b:200", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	g2.Close()
	// A clean stop gives the name back at once.
	g1.Close()
	start := time.Now()
	g3, err := ClaimName(ctx, b.Conn(), NameClaim{Name: "node.1", Instance: "host-b:200", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer g3.Close()
	if took := time.Since(start); took >= ttl {
		t.Fatalf("reclaiming a resigned name took %s, a full TTL", took)
	}
}

func TestClaimNameAfterACrashWaitsForExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := natsbus.Connect(ctx, natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ttl := 400 * time.Millisecond
	// The dead predecessor: it claimed the name and never renewed.
	cfg := lease.DefaultConfig("n_"+base64.RawURLEncoding.EncodeToString([]byte("n1")), "old-pid")
	cfg.Bucket, cfg.Timing = NamesBucket, contender.DefaultTiming(ttl)
	dead, err := lease.New(ctx, b.Conn(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := dead.Tick(ctx); !st.Leader {
		t.Fatal("predecessor did not claim")
	}
	g, err := ClaimName(ctx, b.Conn(), NameClaim{Name: "n1", Instance: "new-pid", TTL: ttl})
	if err != nil {
		t.Fatalf("restart after a crash: %v", err)
	}
	defer g.Close()
	if !g.Held() {
		t.Fatal("claim not held")
	}
}
