package targets

import (
	"fmt"
	"testing"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
)

// op is one call on the state; the table lists each call with what it
// answered ("" for calls that answer nothing) and the state after it.
type op struct {
	call  string // dispatch, next, loaded, failed, closed, reack, idle
	v     int64
	want  string // the call's answer
	state string
}

func run(t *testing.T, s State, ops []op) {
	t.Helper()
	for i, o := range ops {
		var got string
		switch o.call {
		case "dispatch":
			s.Dispatch(o.v)
		case "next":
			v, ok := s.Next()
			got = fmt.Sprint(v, ok)
		case "loaded":
			s.Handled(o.v, Loaded)
		case "failed":
			s.Handled(o.v, Failed)
		case "closed":
			s.Handled(o.v, Closed)
		case "reack":
			v, ok := s.Reack(o.v)
			got = fmt.Sprint(v, ok)
		case "idle":
			got = fmt.Sprint(s.Idle())
		default:
			t.Fatalf("op %d: unknown call %q", i, o.call)
		}
		if got != o.want || s.String() != o.state {
			t.Fatalf("op %d %s(%d): answered %q, state %s; want %q, %s", i, o.call, o.v, got, s, o.want, o.state)
		}
	}
}

func TestTargets(t *testing.T) {
	for _, tc := range []struct {
		name string
		have int64
		ops  []op
	}{
		{"a dispatch is the next target; loading it makes the agent idle", 0, []op{
			{"idle", 0, "true", "want=0 have=0 failed=none gone=false"},
			{"next", 0, "0 false", "want=0 have=0 failed=none gone=false"},
			{"dispatch", 3, "", "want=3 have=0 failed=none gone=false"},
			{"idle", 0, "false", "want=3 have=0 failed=none gone=false"},
			{"next", 0, "3 true", "want=3 have=0 failed=none gone=false"},
			{"loaded", 3, "", "want=3 have=3 failed=none gone=false"},
			{"idle", 0, "true", "want=3 have=3 failed=none gone=false"},
		}},
		{"targets coalesce: newer dispatches while working raise the next target; older ones change nothing", 0, []op{
			{"dispatch", 1, "", "want=1 have=0 failed=none gone=false"},
			{"next", 0, "1 true", "want=1 have=0 failed=none gone=false"},
			{"dispatch", 2, "", "want=2 have=0 failed=none gone=false"},
			{"dispatch", 4, "", "want=4 have=0 failed=none gone=false"},
			{"dispatch", 3, "", "want=4 have=0 failed=none gone=false"},
			{"loaded", 1, "", "want=4 have=1 failed=none gone=false"},
			{"next", 0, "4 true", "want=4 have=1 failed=none gone=false"},
			{"loaded", 4, "", "want=4 have=4 failed=none gone=false"},
			{"next", 0, "0 false", "want=4 have=4 failed=none gone=false"},
		}},
		{"a failure is handled; only a dispatch of it (or newer) tries again", 0, []op{
			{"dispatch", 2, "", "want=2 have=0 failed=none gone=false"},
			{"failed", 2, "", "want=2 have=2 failed=2 gone=false"},
			{"idle", 0, "true", "want=2 have=2 failed=2 gone=false"},
			{"next", 0, "0 false", "want=2 have=2 failed=2 gone=false"},
			{"reack", 2, "2 false", "want=2 have=2 failed=2 gone=false"},
			{"dispatch", 1, "", "want=2 have=2 failed=2 gone=false"},
			{"next", 0, "0 false", "want=2 have=2 failed=2 gone=false"},
			{"dispatch", 2, "", "want=2 have=1 failed=none gone=false"},
			{"next", 0, "2 true", "want=2 have=1 failed=none gone=false"},
			{"loaded", 2, "", "want=2 have=2 failed=none gone=false"},
			{"reack", 2, "2 true", "want=2 have=2 failed=none gone=false"},
		}},
		{"a newer dispatch after a failure goes on to it", 0, []op{
			{"dispatch", 2, "", "want=2 have=0 failed=none gone=false"},
			{"failed", 2, "", "want=2 have=2 failed=2 gone=false"},
			{"dispatch", 3, "", "want=3 have=2 failed=2 gone=false"},
			{"next", 0, "3 true", "want=3 have=2 failed=2 gone=false"},
			{"loaded", 3, "", "want=3 have=3 failed=none gone=false"},
		}},
		{"a stopped engine is gone for good", 0, []op{
			{"dispatch", 1, "", "want=1 have=0 failed=none gone=false"},
			{"closed", 1, "", "want=1 have=1 failed=1 gone=true"},
			{"dispatch", 1, "", "want=1 have=0 failed=none gone=true"},
			{"dispatch", 5, "", "want=5 have=0 failed=none gone=true"},
			{"next", 0, "0 false", "want=5 have=0 failed=none gone=true"},
			{"idle", 0, "true", "want=5 have=0 failed=none gone=true"},
			{"reack", 0, "0 false", "want=5 have=0 failed=none gone=true"},
		}},
		{"reack: only when idle and serving the version or newer", 0, []op{
			{"reack", 0, "0 true", "want=0 have=0 failed=none gone=false"},
			{"reack", 1, "0 false", "want=0 have=0 failed=none gone=false"},
			{"dispatch", 2, "", "want=2 have=0 failed=none gone=false"},
			{"reack", 0, "0 false", "want=2 have=0 failed=none gone=false"},
			{"loaded", 2, "", "want=2 have=2 failed=none gone=false"},
			{"reack", 1, "2 true", "want=2 have=2 failed=none gone=false"},
		}},
		{"a fresh engine (no version of the run) loads the base, target 0", tracker.NoVersion, []op{
			{"reack", tracker.NoVersion, "-1 false", "want=-1 have=-1 failed=none gone=false"},
			{"dispatch", 0, "", "want=0 have=-1 failed=none gone=false"},
			{"next", 0, "0 true", "want=0 have=-1 failed=none gone=false"},
			{"failed", 0, "", "want=0 have=0 failed=0 gone=false"},
			{"dispatch", 0, "", "want=0 have=-1 failed=none gone=false"},
			{"next", 0, "0 true", "want=0 have=-1 failed=none gone=false"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { run(t, New(tc.have), tc.ops) })
	}
}
