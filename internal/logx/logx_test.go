package logx

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestParseLevel(t *testing.T) {
	tests := []struct {
		in      string
		want    zerolog.Level
		wantErr string
	}{
		{"debug", zerolog.DebugLevel, ""},
		{"info", zerolog.InfoLevel, ""},
		{"WARN", zerolog.WarnLevel, ""},
		{" error ", zerolog.ErrorLevel, ""},
		{"verbose", zerolog.NoLevel, `logx: unknown log level "verbose" (want debug, info, warn or error)`},
		{"", zerolog.NoLevel, `logx: unknown log level "" (want debug, info, warn or error)`},
		{"trace", zerolog.NoLevel, `logx: unknown log level "trace" (want debug, info, warn or error)`},
	}
	for _, tt := range tests {
		got, err := ParseLevel(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr || !errors.Is(err, ErrLevel) {
				t.Errorf("ParseLevel(%q) err = %v, want %q wrapping ErrLevel", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseFormat(t *testing.T) {
	for _, in := range []string{"auto", "JSON", "console"} {
		if _, err := ParseFormat(in); err != nil {
			t.Errorf("ParseFormat(%q): %v", in, err)
		}
	}
	_, err := ParseFormat("xml")
	if want := `logx: unknown log format "xml" (want auto, json or console)`; err == nil || err.Error() != want || !errors.Is(err, ErrFormat) {
		t.Errorf("ParseFormat(xml) err = %v, want %q", err, want)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := New(Options{Level: "loud"}); !errors.Is(err, ErrLevel) {
		t.Errorf("bad level: err = %v", err)
	}
	if _, err := New(Options{Format: "yaml"}); !errors.Is(err, ErrFormat) {
		t.Errorf("bad format: err = %v", err)
	}
}

var fixed = time.Date(2026, 11, 29, 12, 34, 56, 789_000_000, time.FixedZone("CET", 3600))

// TestJSONShape: auto on a non-terminal writes one JSON object per record
// with level, UTC millisecond time, message and the child logger's fields.
func TestJSONShape(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(Options{Level: "info", Out: &buf, Now: func() time.Time { return fixed }})
	if err != nil {
		t.Fatal(err)
	}
	rl := ForActor(l, "rollout", "rollout-3")
	rl.Info().Int("group", 7).Msg("group done")
	router := For(l, "router")
	router.Warn().Msg("replica down")
	l.Debug().Msg("hidden at info")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 records (debug filtered), got %d:\n%s", len(lines), buf.String())
	}
	want := []map[string]any{
		{"level": "info", "time": "2026-11-29T11:34:56.789Z", "component": "rollout", "actor": "rollout-3", "group": float64(7), "message": "group done"},
		{"level": "warn", "time": "2026-11-29T11:34:56.789Z", "component": "router", "message": "replica down"},
	}
	for i, line := range lines {
		var got map[string]any
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("record %d is not JSON: %v: %s", i, err, line)
		}
		if len(got) != len(want[i]) {
			t.Errorf("record %d: fields %v, want %v", i, got, want[i])
		}
		for k, v := range want[i] {
			if got[k] != v {
				t.Errorf("record %d: %s = %v, want %v", i, k, got[k], v)
			}
		}
	}
}

func TestLevelFilters(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(Options{Level: "error", Format: "json", Out: &buf})
	if err != nil {
		t.Fatal(err)
	}
	l.Warn().Msg("no")
	l.Error().Msg("yes")
	if got := strings.Count(buf.String(), "\n"); got != 1 || !strings.Contains(buf.String(), `"message":"yes"`) {
		t.Errorf("at level error got %q", buf.String())
	}
}

func TestConsoleFormat(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(Options{Format: "console", Out: &buf, Now: func() time.Time { return fixed }})
	if err != nil {
		t.Fatal(err)
	}
	tl := For(l, "trainer")
	tl.Info().Int("step", 3).Msg("stepped")
	out := buf.String()
	// Not a terminal, so no colour codes; time shown in local clock form.
	want := fixed.Local().Format("15:04:05.000") + " INF stepped component=trainer step=3\n"
	if out != want {
		t.Errorf("console output %q, want %q", out, want)
	}
}

func TestIsTerminalOnBuffer(t *testing.T) {
	if IsTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is not a terminal")
	}
}

func TestLimit(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(Options{Format: "json", Out: &buf})
	if err != nil {
		t.Fatal(err)
	}
	// An hour-long period: the test cannot cross it, so exactly burst pass.
	limited := Limit(For(l, "router"), 3, time.Hour)
	for range 10 {
		limited.Warn().Msg("replica refused")
	}
	l.Warn().Msg("other") // the parent logger is not limited
	if got := strings.Count(buf.String(), `"message":"replica refused"`); got != 3 {
		t.Errorf("limited records = %d, want 3:\n%s", got, buf.String())
	}
	if !strings.Contains(buf.String(), `"message":"other"`) {
		t.Error("parent logger was limited too")
	}
}
