package main

import (
	"strings"
	"testing"
)

func TestParseWrk(t *testing.T) {
	out := []byte("Running 10s test @ http://127.0.0.1:1\n  2 threads and 16 connections\nHOPBENCH requests=50000 duration_us=10000000 errors=3 p50_us=250 p99_us=4000\n")
	c, err := ParseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	if c.Requests != 50000 || c.Seconds != 10 || c.Errors != 3 || c.P50us != 250 || c.P99us != 4000 || c.RPS() != 5000 {
		t.Fatalf("parsed %+v", c)
	}
	if _, err := ParseWrk([]byte("no line\n")); err == nil {
		t.Fatal("no HOPBENCH line: want an error")
	}
}

// utime and stime are fields 14 and 15, counted after the command name,
// which may hold spaces and parentheses.
func TestParseStatCPU(t *testing.T) {
	stat := []byte("1234 (we ird) name)) S 1 2 3 4 5 6 7 8 9 10 250 150 0 0 20 0 1 0 100 0 0\n")
	got, err := ParseStatCPU(stat)
	if err != nil || got != 4.0 {
		t.Fatalf("cpu %v, err %v; want 4 s (400 ticks)", got, err)
	}
}

// Ratios are taken within each repetition before the median.
func TestTableRatiosWithinRepetition(t *testing.T) {
	cells := []Cell{
		{Rep: 0, Conns: 1, Target: "haproxy_stick", Requests: 1000, Seconds: 1, CPUSeconds: 0.1},
		{Rep: 0, Conns: 1, Target: "router", Requests: 2000, Seconds: 1, CPUSeconds: 0.4},
		{Rep: 1, Conns: 1, Target: "haproxy_stick", Requests: 4000, Seconds: 1, CPUSeconds: 0.4},
		{Rep: 1, Conns: 1, Target: "router", Requests: 2000, Seconds: 1, CPUSeconds: 0.2},
		{Rep: 2, Conns: 1, Target: "haproxy_stick", Requests: 1000, Seconds: 1, CPUSeconds: 0.1},
		{Rep: 2, Conns: 1, Target: "router", Requests: 1500, Seconds: 1, CPUSeconds: 0.15},
	}
	tab := Table(cells, []string{"haproxy_stick", "router"}, []int{1})
	// router ÷ haproxy req/s per rep: 2, 0.5, 1.5 → median 1.5; CPU per request: 2, 1, 1 → 1.
	if !strings.Contains(tab, "| 1 | router | 2000 | — | 10.00 | 1.50 | 1.00 | 0 |") {
		t.Fatalf("table:\n%s", tab)
	}
}
