package node

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
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
	)
}
