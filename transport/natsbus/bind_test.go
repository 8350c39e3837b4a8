package natsbus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/transport"
)

// BindStream opens a stream its owner made, as the owner made it, and
// never creates one: a missing stream is an error that says who makes it.
func TestBindStreamNeverCreates(t *testing.T) {
	b := embedded(t, nil)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := b.BindStream(ctx, "groups-r1")
	if !errors.Is(err, jetstream.ErrStreamNotFound) || !strings.Contains(err.Error(), "its owner") {
		t.Fatalf("BindStream of a missing stream = %v, want ErrStreamNotFound naming its owner", err)
	}
	cfg := transport.StreamConfig{Name: "groups-r1", Subjects: []string{"asyncrl.r1.trajectories"}, Memory: true, Duplicates: 5 * time.Second}
	if _, err := b.Stream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := b.BindStream(ctx, "groups-r1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Publish(ctx, "asyncrl.r1.trajectories", []byte("g")); err != nil {
		t.Fatalf("publish through the bound stream: %v", err)
	}
	js, err := jetstream.New(b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "groups-r1")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Duplicates != 5*time.Second || info.State.Msgs != 1 {
		t.Fatalf("after bind: duplicates %s, %d messages; want the owner's 5s and the one published", info.Config.Duplicates, info.State.Msgs)
	}
}
