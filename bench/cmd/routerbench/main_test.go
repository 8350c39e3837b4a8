package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/bench/routerbench"
)

func TestMakeWorkload(t *testing.T) {
	ss, shared, _, err := makeWorkload("agentic", 3, 5, 0, 0, 1)
	if err != nil || len(ss) != 3 || ss[0].Turns() != 5 || shared != 2000 {
		t.Fatalf("agentic: %d sessions, %d shared, %v", len(ss), shared, err)
	}
	ss, shared, _, err = makeWorkload("groups", 0, 0, 2, 3, 1)
	if err != nil || len(ss) != 6 || shared != 0 {
		t.Fatalf("groups: %d sessions, %d shared, %v", len(ss), shared, err)
	}
	if _, _, _, err := makeWorkload("chat", 1, 1, 1, 1, 1); err == nil {
		t.Fatal("unknown workload accepted")
	}
}

func TestPolicySpec(t *testing.T) {
	tests := []struct {
		spec, name string
		c          float64
		ok         bool
	}{
		{"bounded_sticky", "bounded_sticky", 0, true},
		{"bounded_sticky@c=2", "bounded_sticky", 2, true},
		{"bounded_sticky@c=0.5", "", 0, false},
		{"bounded_sticky@x=2", "", 0, false},
	}
	for _, tc := range tests {
		name, c, err := policySpec(tc.spec)
		if (err == nil) != tc.ok || name != tc.name || c != tc.c {
			t.Errorf("policySpec(%q) = %q, %v, %v", tc.spec, name, c, err)
		}
	}
}

func TestIntsRejectsGarbage(t *testing.T) {
	got, err := ints(" 1, 16 ,,64")
	if err != nil || len(got) != 3 || got[1] != 16 {
		t.Fatalf("ints = %v, %v", got, err)
	}
	if _, err := ints("1,x"); err == nil {
		t.Fatal("bad integer accepted")
	}
}

func TestRenderReadsRawResults(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	raw := [][]routerbench.Result{{{Policy: "consistent_hash", Pressure: 1, Generated: 100, ConvMax: 10, PerReplica: []int{1}}}}
	b, _ := json.Marshal(raw)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// render writes to stdout; redirect it to check the table came out.
	out, err := os.CreateTemp(dir, "out")
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = out
	err = render("compare", path, "consistent_hash")
	os.Stdout = stdout
	out.Close()
	if err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(out.Name())
	if !contains(string(text), "| consistent_hash | 10 | 1.00 |") {
		t.Fatalf("table:\n%s", text)
	}
	if err := render("compare", filepath.Join(dir, "missing.json"), "x"); err == nil {
		t.Fatal("missing file accepted")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
