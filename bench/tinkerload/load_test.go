package tinkerload

import (
	"context"
	"testing"
	"time"
)

// TestSmallLoadLosesNothing: 512 sample futures in flight at once through
// one server (the benchmark at a test's size) all come back, none lost,
// no errors — read as JSON, and as protobuf the way SDK 0.25 reads them
// (every result's tokens and logprobs checked).
func TestSmallLoadLosesNothing(t *testing.T) {
	for _, pb := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := Run(ctx, Options{N: 512, Delay: time.Millisecond, EngineConcurrency: 16, Conns: 16, Tokens: 4, Dir: t.TempDir(), Protobuf: pb})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != 0 || res.Lost != 0 || res.N != 512 {
			t.Fatalf("%v", res)
		}
		t.Log(res)
	}
}
