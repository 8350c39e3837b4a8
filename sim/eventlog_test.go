package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/messages"
)

var updateHashes = flag.Bool("update", false, "rewrite testdata/loghashes.golden")

// The log's clock column is fmt's "%10.3fs " (the hash of every seed
// depends on it); appendClock writes it without fmt.
func TestAppendClockMatchesFmt(t *testing.T) {
	ds := []time.Duration{0, 1, 499_999, 500_000, 1_500_000, 2_500_000, 999_999_999, time.Second,
		9_999_999_999, 12*time.Second + 345*time.Millisecond, 99_999_499_999, 99_999_500_000, 123456 * time.Second,
		math.MaxInt64}
	for i := range 2000 {
		ds = append(ds, time.Duration(i)*1_234_567+time.Duration(i%7)*500_000)
	}
	for _, d := range ds {
		want := fmt.Sprintf("%10.3fs ", d.Seconds())
		if got := string(appendClock(nil, d)); got != want {
			t.Fatalf("appendClock(%d) = %q, want %q", d, got, want)
		}
	}
}

// appendBrief writes the brief forms of the two token-carrying messages
// that fmt wrote before; other messages are their String().
func TestAppendBriefMatchesFormat(t *testing.T) {
	req := messages.TurnRequest{Header: messages.Header{RunID: runID, Sender: "ctl", Version: 3}, TrajectoryID: "p4#2.1",
		GroupID: "p4#2", TurnIndex: 2, Engine: "e1", Tokens: make([]int32, 37), MaxTokens: 12}
	res := messages.TurnResult{Header: messages.Header{RunID: runID, Sender: "e1"}, TrajectoryID: "p4#2.1", TurnIndex: 2,
		Engine: "e1", Tokens: make([]int32, 5), ServingVersion: 4, TokenVersions: []int32{3, 4, 4, 5, 4}}
	noVers := res
	noVers.TokenVersions = nil
	health := messages.EngineHealth{Header: messages.Header{RunID: runID, Sender: "e0"}, Engine: "e0", URL: "e0", Healthy: true}
	for _, c := range []struct {
		m    messages.Message
		want string
	}{
		{req, "TurnRequest traj=p4#2.1 turn=2 engine=e1 ctx=37 max=12 min_v=3"},
		{res, "TurnResult traj=p4#2.1 turn=2 engine=e1 tokens=5 v=3..5"},
		{noVers, "TurnResult traj=p4#2.1 turn=2 engine=e1 tokens=5 v=4..4"},
		{health, health.String()},
	} {
		if got := string(appendBrief([]byte("x "), c.m)); got != "x "+c.want {
			t.Errorf("appendBrief(%s) = %q, want %q", c.m.Kind(), got, "x "+c.want)
		}
	}
}

// The log keeps every line (in chunks) and hashes each with its newline;
// the trace is the last keep non-routine lines, oldest first.
func TestEventLogKeepsHashesAndTraces(t *testing.T) {
	l := newEventLog(3)
	h := sha256.New()
	var want []string
	long := strings.Repeat("z", logChunk+10) // longer than a chunk: a chunk of its own
	for i := range 20 {
		routine := i%3 == 0
		at := time.Duration(i) * 1_250 * time.Microsecond
		switch {
		case i == 7:
			l.addStrings(at, routine, "x ", long)
		case i%2 == 0:
			l.add(at, routine, "line %d %s", i, "a")
		default:
			l.addDelivery(at, routine, "e1", messages.StepDone{Step: int64(i)})
		}
		var text string
		switch {
		case i == 7:
			text = "x " + long
		case i%2 == 0:
			text = fmt.Sprintf("line %d %s", i, "a")
		default:
			text = "e1 <- " + messages.StepDone{Step: int64(i)}.String()
		}
		line := fmt.Sprintf("%10.3fs %s", at.Seconds(), text)
		h.Write([]byte(line + "\n"))
		want = append(want, line)
	}
	if got := hexsum(l.logHash); got != hex.EncodeToString(h.Sum(nil)) {
		t.Fatalf("hash %s differs from the hash of the lines", got)
	}
	if got := l.full(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("full log differs:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Non-routine: i%3 != 0; the last three are 16, 17, 19.
	tr := l.trace()
	if len(tr) != 3 || tr[0] != want[16] || tr[1] != want[17] || tr[2] != want[19] {
		t.Fatalf("trace = %q, want lines 16, 17, 19", tr)
	}
	if got := newEventLog(3); got.trace() != nil {
		t.Fatalf("empty log's trace = %q, want nil", got.trace())
	}
}

// TestLogHashesPinned pins the event-log hash of a few seeds of every
// scenario: a change meant only to make the simulator faster (or to tidy
// it) must leave every run exactly as it was. A change that alters the
// simulation on purpose updates the file: go test ./sim -run
// TestLogHashesPinned -update.
func TestLogHashesPinned(t *testing.T) {
	var b strings.Builder
	for _, sc := range Scenarios {
		for seed := int64(1); seed <= 3; seed++ {
			res, err := Run(Config{Seed: seed, Scenario: sc})
			if err != nil {
				t.Fatalf("seed %d %s: %v", seed, sc, err)
			}
			fmt.Fprintf(&b, "%s %d %s events=%d\n", sc, seed, res.LogHash, res.Events)
		}
	}
	path := filepath.Join("testdata", "loghashes.golden")
	if *updateHashes {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	if b.String() != string(want) {
		t.Fatalf("event-log hashes changed (a run is no longer what it was):\n%s\nwant (%s):\n%s", b.String(), path, want)
	}
}
