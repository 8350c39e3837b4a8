package rankhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/actors/trainer/bridge"
	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// members is a membership the test edits.
type members struct {
	mu    sync.Mutex
	alive map[string]bool
}

func (m *members) is(n string) bool { m.mu.Lock(); defer m.mu.Unlock(); return m.alive[n] }
func (m *members) set(n string, v bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.alive[n] = v
}

// ranks are two ranks' Init.group of a world of 4 (this host's share).
func ranks() []bridge.Group {
	return []bridge.Group{{Rank: 2, WorldSize: 4, Addr: "127.0.0.1", Port: 29500}, {Rank: 3, WorldSize: 4, Addr: "127.0.0.1", Port: 29500}}
}

func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// environ is pid's environment.
func environ(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.ReplaceAll(b, []byte{0}, []byte{'\n'}))
}

// TestHostStartsFencesAndKills: over a real (embedded) NATS bus, a
// holder's Links start two ranks on another node's Host — its own
// command, with torch's environment for each rank; a newer term's start
// kills them first (fencing) and the older term's frames are refused; the
// holder's Kill ends one rank; the owner leaving the membership ends the
// rest. The ranks are sleeping processes: this is about processes and
// messages, not training (actors/trainer's tests train through the relay).
func TestHostStartsFencesAndKills(t *testing.T) {
	bus := clustertest.EmbeddedBus(t)
	plan := transport.MustPlan("r")
	ms := &members{alive: map[string]bool{"h": true, "a": true, "b": true}}
	h, err := StartHost(bus, HostConfig{Node: "h", Plan: plan, Spec: bridge.Spec{Argv: []string{"/bin/sleep", "300"}, Env: []string{"FROM_CONFIG=1"}},
		Alive: ms.is, Every: 50 * time.Millisecond, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx := context.Background()
	links := func(owner string, token uint64) *Links {
		return NewLinks(bus, LinksConfig{Owner: owner, Token: token, Term: fmt.Sprintf("r-t%d", token), Plan: plan, PerNode: 2,
			Pick: func() []string { return []string{"h"} }, Alive: ms.is, Wait: time.Second})
	}
	la := links("a", 1)
	l1, err := la.StartRanks(ctx, ranks())
	if err != nil {
		t.Fatal(err)
	}
	old := h.Pids()
	if len(l1) != 2 || len(old) != 2 {
		t.Fatalf("%d links, pids %v; want 2 ranks", len(l1), old)
	}
	for i, pid := range old {
		env := environ(t, pid)
		for _, want := range []string{"FROM_CONFIG=1", "WORLD_SIZE=4", "MASTER_PORT=29500", fmt.Sprintf("LOCAL_RANK=%d", i), "LOCAL_WORLD_SIZE=2"} {
			if !strings.Contains(env, want+"\n") {
				t.Errorf("rank pid %d's environment lacks %s", pid, want)
			}
		}
	}
	if !strings.Contains(environ(t, old[0]), "RANK=2\n") && !strings.Contains(environ(t, old[1]), "RANK=2\n") {
		t.Error("no rank has RANK=2")
	}

	// The same holder starts a new group (a group restart whose kills
	// were lost, or overtook the start): its previous ranks here end.
	if _, err := la.StartRanks(ctx, ranks()); err != nil { // group r-t1-g2
		t.Fatal(err)
	}
	for _, pid := range old {
		if !gone(pid) {
			t.Errorf("the holder's previous group's rank %d still runs after its new group started", pid)
		}
	}
	if got := h.Pids(); len(got) != 2 {
		t.Fatalf("pids %v after the holder's new group; want its 2", got)
	}
	old = h.Pids()

	// A newer term (token 2) starts its group here: token 1's ranks are
	// gone before its start returns.
	l2, err := links("b", 2).StartRanks(ctx, ranks())
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range old {
		if !gone(pid) {
			t.Errorf("the deposed holder's rank %d still runs after a newer term's start", pid)
		}
	}
	if got := h.Pids(); len(got) != 2 {
		t.Fatalf("pids %v after the new term's start; want its 2", got)
	}
	body, _ := bridge.EncodeFrame(&bridge.Shutdown{Header: bridge.Header{V: 1, Type: bridge.TypeShutdown, ID: 1}})
	if _, err := l1[0].Exchange(ctx, body, time.Second); err == nil || !strings.Contains(err.Error(), "superseded by token 2") {
		t.Errorf("the deposed holder's frame: %v; want it refused as superseded", err)
	}
	if _, err := links("a", 1).StartRanks(ctx, ranks()); err == nil || !strings.Contains(err.Error(), "superseded") {
		t.Errorf("the deposed holder's new start: %v; want it refused", err)
	}

	// A frame the rank never answers (sleep reads nothing) misses its
	// deadline on the far side and comes back as bridge.ErrDeadline.
	if _, err := l2[0].Exchange(ctx, body, 200*time.Millisecond); !errors.Is(err, bridge.ErrDeadline) {
		t.Errorf("unanswered frame: %v; want ErrDeadline", err)
	}
	// A frame larger than the bus carries is refused with the sizes.
	big := make([]byte, bus.MaxPayload()+1)
	if _, err := l2[1].Exchange(ctx, big, time.Second); err == nil || !strings.Contains(err.Error(), "exceeds the bus's max payload") {
		t.Errorf("oversized frame: %v", err)
	}

	// The holder ends one rank; its owner leaving ends the other.
	cur := h.Pids()
	l2[0].Kill()
	if h.Ranks() != 1 {
		t.Errorf("%d ranks after the holder killed one; want 1", h.Ranks())
	}
	ms.set("b", false)
	clustertest.WaitFor(t, 10*time.Second, "the departed holder's ranks to be killed", func() bool {
		return h.Ranks() == 0 && gone(cur[0]) && gone(cur[1])
	})

	// Too few nodes to place a group on: a clear error after Wait.
	short := NewLinks(bus, LinksConfig{Owner: "a", Token: 3, Term: "r-t3", Plan: plan, PerNode: 1,
		Pick: func() []string { return []string{"h"} }, Wait: 300 * time.Millisecond})
	if _, err := short.StartRanks(ctx, ranks()); err == nil || !strings.Contains(err.Error(), "trainer.exec_nodes needs 2 trainer node(s) besides a") {
		t.Errorf("too few nodes: %v", err)
	}
}

// TestHostCloseKillsRanks: a node that stops takes its hosted ranks with
// it.
func TestHostCloseKillsRanks(t *testing.T) {
	bus := clustertest.EmbeddedBus(t)
	plan := transport.MustPlan("r")
	h, err := StartHost(bus, HostConfig{Node: "h", Plan: plan, Spec: bridge.Spec{Argv: []string{"/bin/sleep", "300"}}, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	l := NewLinks(bus, LinksConfig{Owner: "a", Token: 1, Term: "r-t1", Plan: plan, PerNode: 2, Pick: func() []string { return []string{"h"} }})
	if _, err := l.StartRanks(context.Background(), ranks()); err != nil {
		t.Fatal(err)
	}
	pids := h.Pids()
	h.Close()
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("rank %d outlived its host", pid)
		}
	}
}
