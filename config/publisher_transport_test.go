package config

import (
	"strings"
	"testing"
)

// TestPublisherTransport: store is the default, dataplane is accepted with
// mode delta, refused with another mode, and an unknown value is refused.
func TestPublisherTransport(t *testing.T) {
	c := DefaultPublisher()
	if c.Transport != TransportStore {
		t.Fatalf("default transport %q", c.Transport)
	}
	c.Transport = TransportDataPlane
	if err := c.Validate(); err != nil {
		t.Fatalf("dataplane with delta: %v", err)
	}
	c.Mode = PublishFull
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "transport") {
		t.Fatalf("dataplane with full: %v", err)
	}
	c = DefaultPublisher()
	c.Transport = "carrier-pigeon"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "transport") {
		t.Fatalf("unknown transport: %v", err)
	}
}
