package rollout

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/actors/rollout/outcome"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// failOne fails every turn of one session and answers the others.
type failOne struct{ session string }

func (f failOne) Generate(_ context.Context, r TurnRequest) (TurnOutput, error) {
	if r.SessionID == f.session {
		return TurnOutput{}, errors.New("engine refused")
	}
	return text("a", true, 0, "stop"), nil
}
func (failOne) FinishSession(context.Context, string) error { return nil }

// TestMemberAbortReportsEveryTrajectory: the outcome core through the
// real shell — one aborted episode aborts the group once all its episodes
// ended, with one EpisodeAborted per trajectory (the aborted one with its
// reason, the other with outcome.MemberAborted) and no GroupReady.
func TestMemberAbortReportsEveryTrajectory(t *testing.T) {
	bus, subj, aborted := abortsBus(t)
	ready := make(chan struct{}, 1)
	if _, err := bus.Subscribe(subj.Groups, func(*transport.Msg) { ready <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	a, err := Start(bus, failOne{session: "g/1"}, Config{RunID: "r", Name: "rollout-0", Task: mustTask(t, "reverse"),
		Episode: testCfg(), Concurrency: 2, Subjects: subj})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	data, _ := messages.Encode(messages.PromptAssigned{Header: messages.Header{RunID: "r"}, PromptID: PromptID("p", 1),
		GroupID: "g", Text: "rev ab=", NSamples: 2})
	if err := bus.Publish(context.Background(), subj.Prompts, data); err != nil {
		t.Fatal(err)
	}
	var got []messages.EpisodeAborted
	for len(got) < 2 {
		select {
		case ab := <-aborted:
			got = append(got, ab)
		case <-time.After(10 * time.Second):
			t.Fatalf("aborts %v; want 2 (stats %+v)", got, a.Stats())
		}
	}
	slices.SortFunc(got, func(x, y messages.EpisodeAborted) int { return strings.Compare(x.TrajectoryID, y.TrajectoryID) })
	if got[0].TrajectoryID != "g/0" || got[0].Reason != outcome.MemberAborted || got[0].PromptID != PromptID("p", 1) {
		t.Errorf("report for g/0: %v", got[0])
	}
	if got[1].TrajectoryID != "g/1" || got[1].Reason == outcome.MemberAborted || got[1].Reason == "" {
		t.Errorf("report for g/1: %v; want its own reason", got[1])
	}
	select {
	case <-ready:
		t.Fatal("an aborted group was published as ready")
	default:
	}
	if s := a.Stats(); s.GroupsAborted != 1 || s.GroupsReady != 0 {
		t.Errorf("stats %+v; want 1 group aborted", s)
	}
}

// abortsBus is an embedded bus (closed at the test's end), the rollout
// subjects the actor tests use, and the EpisodeAborted reports published
// on it.
func abortsBus(t *testing.T) (*natsbus.Bus, Subjects, chan messages.EpisodeAborted) {
	t.Helper()
	bus, err := natsbus.Connect(context.Background(), natsbus.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bus.Close() })
	subj := Subjects{Prompts: "asyncrl.r.prompts", Groups: "asyncrl.r.groups", Aborted: "asyncrl.r.aborted"}
	aborted := make(chan messages.EpisodeAborted, 8)
	if _, err := bus.Subscribe(subj.Aborted, func(m *transport.Msg) {
		if ab, err := messages.DecodeAs[messages.EpisodeAborted](m.Data); err == nil {
			aborted <- ab
		}
	}); err != nil {
		t.Fatal(err)
	}
	return bus, subj, aborted
}
