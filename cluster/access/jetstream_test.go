package access

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// roleConn connects to url as node's role user.
func roleConn(t *testing.T, url, node string, roles []string) (*natsbus.Bus, jetstream.JetStream) {
	t.Helper()
	opts := natsbus.DefaultOptions()
	opts.URL, opts.Name = url, node
	opts.Auth = natsbus.Auth{User: UserName(node, roles), Password: "pw-" + node}
	b, err := natsbus.Connect(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	js, err := jetstream.New(b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	return b, js
}

// TestJetStreamAPIPerRole runs an embedded nats-server whose users have
// the table's permissions. The trainer (pipeline) user makes the run's
// streams; an engine user and a rollout user then try to create a
// stream, delete, purge and update the trainer's, and the server refuses
// each: nothing changes, and each connection counts the violations. What
// the roles do in a run still works: claim a name (the names bucket,
// created by whoever comes first), bind the trajectory buffer, read a
// stream through a consumer, and the tinker user makes its own bucket.
func TestJetStreamAPIPerRole(t *testing.T) {
	nodes := map[string][]string{"n1": {placement.Trainer}, "n2": {placement.Engine}, "n3": {placement.Rollout}, "n4": {placement.Tinker}}
	opts := natsbus.DefaultOptions()
	opts.Name = "access-js"
	for n, roles := range nodes {
		p := Permissions(roles)
		opts.Users = append(opts.Users, natsbus.User{Name: UserName(n, roles), Password: "pw-" + n, Permissions: &p})
	}
	opts.Auth = natsbus.Auth{User: UserName("n1", nodes["n1"]), Password: "pw-n1"}
	srv, err := natsbus.Connect(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	trainerJS, err := jetstream.New(srv.Conn())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The trainer's streams: the ledger (one message in it) and a term's
	// trajectory buffer.
	for _, c := range []jetstream.StreamConfig{
		{Name: "ledger-r1", Subjects: []string{"asyncrl.r1.ledger"}, Storage: jetstream.MemoryStorage},
		{Name: "groups-r1-t3", Subjects: []string{"asyncrl.r1-t3.trajectories"}, Storage: jetstream.MemoryStorage,
			Retention: jetstream.WorkQueuePolicy, MaxAge: time.Hour},
	} {
		if _, err := trainerJS.CreateStream(ctx, c); err != nil {
			t.Fatalf("the trainer creates %s: %v", c.Name, err)
		}
	}
	if _, err := trainerJS.Publish(ctx, "asyncrl.r1.ledger", []byte("prompt 1")); err != nil {
		t.Fatal(err)
	}

	for _, n := range []string{"n2", "n3"} {
		t.Run(nodes[n][0], func(t *testing.T) {
			bus, js := roleConn(t, srv.ClientURL(), n, nodes[n])
			refused := func(what string, call func(ctx context.Context) error) {
				t.Helper()
				before := bus.PermissionViolations()
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				defer ccancel()
				if err := call(cctx); err == nil {
					t.Errorf("%s: the server let %s do it", what, UserName(n, nodes[n]))
				}
				deadline := time.Now().Add(10 * time.Second)
				for bus.PermissionViolations() == before && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if bus.PermissionViolations() == before {
					t.Errorf("%s: failed, but not as a permission violation", what)
				}
			}
			refused("create a stream", func(ctx context.Context) error {
				_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "rogue-" + n, Subjects: []string{"asyncrl.rogue." + n}})
				return err
			})
			refused("create a stream over the run's subjects", func(ctx context.Context) error {
				_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "shadow-" + n, Subjects: []string{"asyncrl.r1.train"}})
				return err
			})
			refused("delete the ledger", func(ctx context.Context) error { return js.DeleteStream(ctx, "ledger-r1") })
			refused("update the trajectory buffer", func(ctx context.Context) error {
				_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: "groups-r1-t3", Subjects: []string{"asyncrl.r1-t3.trajectories"},
					Storage: jetstream.MemoryStorage, Retention: jetstream.WorkQueuePolicy, MaxAge: time.Second})
				return err
			})
			refused("purge the ledger", func(ctx context.Context) error {
				s, err := js.Stream(ctx, "ledger-r1")
				if err != nil {
					return err
				}
				return s.Purge(ctx)
			})

			// What the role does in a run goes through.
			if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "asyncrl_names", History: 1}); err != nil &&
				!errors.Is(err, jetstream.ErrBucketExists) {
				t.Errorf("claim bucket: %v", err)
			}
			st, err := bus.BindStream(ctx, "groups-r1-t3")
			if err != nil || st.Name() != "groups-r1-t3" {
				t.Errorf("bind the trajectory buffer: %v", err)
			}
			c, err := js.OrderedConsumer(ctx, "ledger-r1", jetstream.OrderedConsumerConfig{})
			if err != nil {
				t.Fatalf("read the ledger: %v", err)
			}
			if m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil || string(m.Data()) != "prompt 1" {
				t.Errorf("read the ledger: %v", err)
			}
		})
	}

	// Nothing the refused calls asked for happened.
	names := trainerJS.StreamNames(ctx)
	var got []string
	for n := range names.Name() {
		got = append(got, n)
	}
	for _, n := range got {
		if n == "rogue-n2" || n == "rogue-n3" || n == "shadow-n2" || n == "shadow-n3" {
			t.Errorf("stream %s exists", n)
		}
	}
	led, err := trainerJS.Stream(ctx, "ledger-r1")
	if err != nil {
		t.Fatalf("the ledger is gone: %v", err)
	}
	if info, err := led.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Errorf("ledger after the refusals: %v, %+v (want its one message)", err, info)
	}
	gs, err := trainerJS.Stream(ctx, "groups-r1-t3")
	if err != nil {
		t.Fatal(err)
	}
	if gs.CachedInfo().Config.MaxAge != time.Hour {
		t.Errorf("trajectory buffer MaxAge %s, want the trainer's 1h", gs.CachedInfo().Config.MaxAge)
	}

	// The tinker user makes (and re-opens) its own bucket, and no other.
	tb, tjs := roleConn(t, srv.ClientURL(), "n4", nodes["n4"])
	for range 2 {
		if _, err := tjs.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "asyncrl_tinker_futures", History: 1}); err != nil {
			t.Fatalf("tinker futures bucket: %v", err)
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
	defer ccancel()
	if _, err := tjs.CreateKeyValue(cctx, jetstream.KeyValueConfig{Bucket: "asyncrl_leases"}); err == nil {
		t.Error("the tinker user created the leases bucket")
	}
	deadline := time.Now().Add(10 * time.Second)
	for tb.PermissionViolations() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if tb.PermissionViolations() == 0 {
		t.Error("the tinker user's refused bucket was no permission violation")
	}
}
