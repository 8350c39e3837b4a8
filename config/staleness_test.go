package config

import (
	"strings"
	"testing"
)

// TestStalenessMeasure: the section loads, defaults to SkyRL's scheduled
// measure, and a bad value names the field and the allowed values.
func TestStalenessMeasure(t *testing.T) {
	if Default().Staleness.Measure != MeasureScheduled {
		t.Fatalf("default measure %q, want scheduled", Default().Staleness.Measure)
	}
	c, err := Parse("run.yaml", []byte("staleness:\n  measure: token\n"))
	if err != nil || c.Staleness.Measure != MeasureToken {
		t.Fatalf("token: %v %+v", err, c.Staleness)
	}
	_, err = Parse("run.yaml", []byte("staleness:\n  measure: oldest\n"))
	if err == nil || !strings.Contains(err.Error(), "staleness.measure") || !strings.Contains(err.Error(), "scheduled") || !strings.Contains(err.Error(), "token") {
		t.Fatalf("bad measure: %v", err)
	}
	if _, err := Parse("run.yaml", []byte("staleness:\n  mesure: token\n")); err == nil || !strings.Contains(err.Error(), "unknown key") {
		t.Fatalf("unknown key: %v", err)
	}
}
