package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/cluster/termwatch"
)

// readEventRecords decodes a JSON event stream; a last line cut short
// (a killed writer) is dropped.
func readEventRecords(t *testing.T, b []byte) []EventRecord {
	t.Helper()
	var out []EventRecord
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var r EventRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			if !bytes.HasSuffix(b, []byte("\n")) && bytes.HasSuffix(b, sc.Bytes()) {
				break
			}
			t.Fatalf("events json line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// readEventsFile reads a node's --events-json file ("" or missing: none).
func readEventsFile(t *testing.T, path string) []EventRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return readEventRecords(t, b)
}

// TestEventsJSONRoundTrip: the agent's term events and text lines written
// to EventsJSON decode back to the same kinds and fields, in order, and
// each record's line is the text line the node prints.
func TestEventsJSONRoundTrip(t *testing.T) {
	var text, js bytes.Buffer
	a := &Agent{cfg: Config{Name: "n1", Events: &text, EventsJSON: &js}}
	evs := []term.Event{
		{Kind: term.LeaseAcquired, Token: 7},
		{Kind: term.Resumed, Token: 7, Step: 0, Version: 0, Count: 16},
		{Kind: term.StepDurable, Token: 7, Step: 3, Version: 3, Reward: 0.5},
		{Kind: term.PromptsRequeued, Token: 7, Node: "n2", Count: 12},
		{Kind: term.Resigned, Token: 7, Reason: term.ReasonStalled},
		{Kind: term.Watch, Token: 7, Watch: termwatch.Event{Kind: termwatch.StepDown, Reason: termwatch.NoStep, For: time.Minute}},
		{Kind: term.RunComplete, Step: 16, Node: "n2"},
	}
	before := time.Now()
	for _, e := range evs {
		a.termEvent(e)
	}
	a.event("member left %s", "n2")
	got := readEventRecords(t, js.Bytes())
	if len(got) != len(evs)+1 {
		t.Fatalf("%d records; want %d:\n%s", len(got), len(evs)+1, js.String())
	}
	lines := strings.Split(strings.TrimSuffix(text.String(), "\n"), "\n")
	for i, e := range evs {
		r := got[i]
		want := EventRecord{Kind: e.Kind.String(), Agent: "n1", Token: e.Token, Step: e.Step, Version: e.Version,
			Count: e.Count, Node: e.Node, Reason: string(e.Reason), Time: r.Time, Line: e.String()}
		if e.Kind == term.Watch {
			want.StepDown, want.Reason = true, string(termwatch.NoStep)
		}
		if r != want {
			t.Errorf("record %d: %+v; want %+v", i, r, want)
		}
		if r.Time.Before(before) {
			t.Errorf("record %d: time %s before the write", i, r.Time)
		}
		if lines[i] != "node n1: "+r.Line {
			t.Errorf("record %d: line %q; the text stream says %q", i, r.Line, lines[i])
		}
	}
	if last := got[len(evs)]; last.Kind != TextKind || last.Line != "member left n2" || last.Agent != "n1" {
		t.Errorf("text record %+v; want kind text, line %q", last, "member left n2")
	}
	if got[0].Kind != "lease-acquired" || got[2].Kind != "step-durable" || got[3].Kind != "prompts-requeued" {
		t.Errorf("kind names changed: %q %q %q", got[0].Kind, got[2].Kind, got[3].Kind)
	}
}

// TestEventsJSONCutLine: a stream whose writer was killed mid-line reads
// back whole records only.
func TestEventsJSONCutLine(t *testing.T) {
	var js bytes.Buffer
	a := &Agent{cfg: Config{Name: "n1", EventsJSON: &js}}
	a.termEvent(term.Event{Kind: term.LeaseAcquired, Token: 3})
	b := append(js.Bytes(), []byte(`{"kind":"step-dur`)...)
	if got := readEventRecords(t, b); len(got) != 1 || got[0].Token != 3 {
		t.Errorf("records %+v; want the one whole record", got)
	}
}
