package agent

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(natsServerEnv); spec != "" {
		os.Exit(runTestNATSServer(spec)) // a NATS server process of the node-loss tests
	}
	goleak.VerifyTestMain(m,
		// nats.go v1.55 jetstream: every object-store Put starts
		// resetPendingAcksOnReconnect and cleans up when it returns; when the
		// cleanup wins the race, the goroutine reads the status channel as
		// nil and blocks forever. One per unlucky Put, in the library.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// The S3 client (minio-go) keeps idle connections' goroutines until
		// its transport is garbage; they are not ours to stop.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		// memberlist's probe of a node that just crashed waits out its
		// timeout even after Shutdown (it returns within ProbeTimeout).
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
	)
}
