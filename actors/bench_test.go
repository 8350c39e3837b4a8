package actors

import (
	"context"
	"errors"
	"testing"
	"time"
)

type nopCore struct{ Effects[struct{}] }

func (*nopCore) Step(time.Time, int)    {}
func (*nopCore) Tick(time.Time, string) {}

// BenchmarkShellTell measures Tell→Step throughput of one shell (no effects),
// retrying when the bounded mailbox pushes back.
func BenchmarkShellTell(b *testing.B) {
	sys, err := NewSystem(DefaultSystemConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer sys.Shutdown(context.Background())
	sh, err := Spawn(sys, DefaultShellConfig("bench", "bench"), func() Core[int, struct{}] { return &nopCore{} }, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for {
			err := sh.Tell(i)
			if err == nil {
				break
			}
			if !errors.Is(err, ErrMailboxFull) {
				b.Fatal(err)
			}
		}
	}
	if err := sh.Stop(context.Background()); err != nil {
		b.Fatal(err)
	}
}
