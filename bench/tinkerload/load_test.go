package tinkerload

import (
	"context"
	"testing"
	"time"
)

// TestSmallLoadLosesNothing: 512 sample futures in flight at once through
// one server (the benchmark at a test's size) all come back, none lost,
// no errors.
func TestSmallLoadLosesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{N: 512, Delay: time.Millisecond, EngineConcurrency: 16, Conns: 16, Tokens: 4, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.Lost != 0 {
		t.Fatalf("%v", res)
	}
	t.Log(res)
}
