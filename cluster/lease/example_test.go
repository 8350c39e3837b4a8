package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// A trainer contends for its lease and starts training when it wins, with
// the fencing token to pass along with every write it makes.
func Example() {
	ctx := context.Background()
	bus, err := natsbus.Connect(ctx, natsbus.DefaultOptions()) // embedded NATS with JetStream
	if err != nil {
		panic(err)
	}
	defer bus.Close()

	won := make(chan uint64, 1)
	cfg := lease.DefaultConfig("trainer", "node-1")
	cfg.OnChange = func(st contender.Status) {
		if st.Leader {
			won <- st.Token // e.g. ledger.Claim(ctx, st.Token, "node-1"), then train
		}
	}
	e, err := lease.New(ctx, bus.Conn(), cfg)
	if err != nil {
		panic(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(rctx) }()

	select {
	case tok := <-won:
		h, _, _ := e.Holder(ctx)
		fmt.Println("leader:", h.Holder, "token matches:", h.Token == tok)
	case <-time.After(10 * time.Second):
		fmt.Println("no lease")
	}
	stop() // Run resigns on the way out, so a standby takes over at once
	<-done
	_, held, _ := e.Holder(ctx)
	fmt.Println("held after stop:", held)
	// Output:
	// leader: node-1 token matches: true
	// held after stop: false
}
