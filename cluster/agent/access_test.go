package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/access"
	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
	"github.com/asyncrl/asyncrl/wiring"
)

// roleBus starts the shared server with one user per node, each allowed
// only its roles' subjects (cluster/access), as an operator's NATS config
// would have them.
func roleBus(t *testing.T, nodes map[string][]string) (url string, pw map[string]string) {
	t.Helper()
	opts := natsbus.DefaultOptions()
	opts.Name = "test-cluster"
	pw = map[string]string{}
	for n, roles := range nodes {
		p := access.Permissions(roles)
		pw[n] = "pw-" + n + "-secret"
		opts.Users = append(opts.Users, natsbus.User{Name: access.UserName(n, roles), Password: pw[n], Permissions: &p})
	}
	// The test's own observer connects as a pipeline user.
	full := access.Permissions([]string{placement.All})
	opts.Users = append(opts.Users, natsbus.User{Name: "observer", Password: "obs", Permissions: &full})
	opts.Auth = natsbus.Auth{User: "observer", Password: "obs"}
	b, err := natsbus.Connect(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b.ClientURL(), pw
}

// TestRoleUsersRunAndRefuse: a trainer node, an engine node and a rollout
// node, each
// connected as a user allowed only its roles' subjects, train two steps
// on the engine node's engines with no permission violation on any
// (the table covers what the roles really do: name claims, leases,
// streams, the term's weight bucket, acks, LoadWeights replies); then the
// engine node publishes a TrainBatch and the server refuses it, while a
// version ack (its own subject) goes through.
func TestRoleUsersRunAndRefuse(t *testing.T) {
	roles := map[string][]string{"n1": {placement.Trainer}, "n2": {placement.Engine}, "n3": {placement.Rollout}}
	url, pw := roleBus(t, roles)
	var ev1, ev2, ev3 syncbuf.Buffer
	logs := map[string]*syncbuf.Buffer{"n1": {}, "n2": {}, "n3": {}}
	var join []string
	mk := func(name string, ev *syncbuf.Buffer) *Agent {
		c := Config{Name: name, Roles: roles[name], Join: join, Run: agentRunConfig(t, 40), Events: ev,
			Logger: zerolog.New(logs[name]).Level(zerolog.ErrorLevel)}
		c.BusSecurity = wiring.BusSecurity{Auth: natsbus.Auth{User: access.UserName(name, roles[name]), Password: pw[name]}}
		return testAgent(t, url, c)
	}
	a1 := mk("n1", &ev1)
	defer a1.Stop()
	join = []string{a1.ms.Addr()}
	a2 := mk("n2", &ev2)
	defer a2.Stop()
	a3 := mk("n3", &ev3)
	defer a3.Stop()
	defer func() {
		if t.Failed() {
			t.Logf("n1 events:\n%s\nn1 log:\n%s\nn2 events:\n%s\nn2 log:\n%s\nn3 events:\n%s\nn3 log:\n%s", ev1.String(), logs["n1"].String(),
				ev2.String(), logs["n2"].String(), ev3.String(), logs["n3"].String())
		}
	}()
	clustertest.WaitFor(t, 60*time.Second, "n3's rollouts to follow n1's term", func() bool { return strings.Contains(ev3.String(), "rollouts follow term") })
	at := lastStep(ev1.String())
	clustertest.WaitFor(t, 60*time.Second, "n1 to train 2 more steps on n2's engines with n3's rollouts", func() bool { return lastStep(ev1.String()) >= at+2 })
	for name, a := range map[string]*Agent{"n1": a1, "n2": a2, "n3": a3} {
		if v := a.Bus().PermissionViolations(); v != 0 {
			t.Errorf("%s (%v) had %d permission violations during the run:\n%s", name, roles[name], v, logs[name].String())
		}
	}

	run := agentRunConfig(t, 4).Run.ID
	train := transport.MustPlan(run).Train
	data, err := messages.Encode(&messages.TrainBatch{Header: messages.Header{RunID: run, Sender: "n2"}, Step: 99})
	if err != nil {
		t.Fatal(err)
	}
	// An observer on the train subject (a pipeline user) sees nothing.
	got := make(chan string, 4)
	osub, err := a1.Bus().Subscribe(train, func(m *transport.Msg) { got <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = osub.Unsubscribe() }()
	if err := a1.Bus().Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a2.Bus().Publish(ctx, train, data); err != nil {
		t.Fatalf("publish (the refusal is the server's, asynchronous): %v", err)
	}
	clustertest.WaitFor(t, 10*time.Second, "the server to refuse n2's TrainBatch", func() bool { return a2.Bus().PermissionViolations() >= 1 })
	if !strings.Contains(logs["n2"].String(), "Permissions Violation for Publish to \\\""+train) {
		t.Errorf("n2's log does not name the refused subject %s:\n%s", train, logs["n2"].String())
	}
	// Its own subject still works, and the observer (subscribed before
	// the refused publish, on the same server) never saw the TrainBatch.
	ack, err := transport.MustPlan(run).Engine("n2-probe", transport.EngineAck)
	if err != nil {
		t.Fatal(err)
	}
	ackGot := make(chan struct{}, 1)
	asub, err := a1.Bus().Subscribe(ack, func(*transport.Msg) { ackGot <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = asub.Unsubscribe() }()
	_ = a1.Bus().Conn().Flush()
	if err := a2.Bus().Publish(ctx, ack, []byte("probe")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ackGot:
	case <-ctx.Done():
		t.Fatal("n2's publish on its own ack subject did not arrive")
	}
	select {
	case s := <-got:
		t.Errorf("the refused TrainBatch arrived on %s", s)
	default:
	}
	for name, l := range logs {
		if strings.Contains(l.String(), pw[name]) {
			t.Errorf("%s logged its password", name)
		}
	}
}
