package config

import (
	"net/url"
	"slices"
)

// BusConfig says which NATS server carries the control plane.
type BusConfig struct {
	// NATSURL is an external NATS server (nats://host:4222); empty starts an
	// embedded server in-process, bound to 127.0.0.1 on a random port.
	NATSURL string `yaml:"nats_url" doc:"external NATS server URL (nats://, tls://, ws://, wss://); empty = embedded server on 127.0.0.1"`
	// JetStreamDir stores the embedded server's JetStream data (trajectory
	// buffer, prompt ledger, versions); empty = <run.data_dir>/jetstream.
	JetStreamDir string `yaml:"jetstream_dir" doc:"JetStream store of the embedded server; empty = <run.data_dir>/jetstream"`
	// MaxPayloadBytes is the largest message; bulk data above it goes on a
	// data plane. NATS itself refuses more than 64 MiB.
	MaxPayloadBytes int `yaml:"max_payload_bytes" doc:"largest bus message in bytes (bulk data above it uses a data plane); at most 64 MiB"`
}

// natsMaxPayloadLimit is the NATS server's hard limit on max_payload.
const natsMaxPayloadLimit = 64 << 20

// DefaultBus is an embedded server with NATS's recommended 8 MiB payloads
// (the server default is 1 MiB; token batches of a few thousand sequences
// fit in 8).
func DefaultBus() BusConfig {
	return BusConfig{MaxPayloadBytes: 8 << 20}
}

// Validate checks the bus section.
func (c BusConfig) Validate() error {
	v := checker{section: "bus"}
	if c.NATSURL != "" {
		u, err := url.Parse(c.NATSURL)
		if err != nil || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, u.Scheme) || u.Host == "" {
			v.fail("nats_url", "%q is not a nats://, tls://, ws:// or wss:// URL with a host", c.NATSURL)
		}
	}
	if c.MaxPayloadBytes < 1 || c.MaxPayloadBytes > natsMaxPayloadLimit {
		v.fail("max_payload_bytes", "must be in [1, %d], got %d", natsMaxPayloadLimit, c.MaxPayloadBytes)
	}
	return v.err()
}
