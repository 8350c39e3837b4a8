package placement

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseRoles(t *testing.T) {
	cases := []struct {
		in      string
		want    string
		wantErr error
	}{
		{"engine,router", "[engine router]", nil},
		{" trainer , publisher,trainer ", "[trainer publisher]", nil},
		{"all", "[all]", nil},
		{"engine,gpu-hog", "", ErrUnknownRole},
		{"Engine", "", ErrUnknownRole},
		{"", "", ErrUnknownRole},
		{" , ", "", ErrUnknownRole},
	}
	for _, tc := range cases {
		got, err := ParseRoles(tc.in)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("ParseRoles(%q) err = %v, want %v", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != tc.want {
			t.Errorf("ParseRoles(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestUnknownRoleMessageListsKnownRoles(t *testing.T) {
	_, err := ParseRoles("engine,traner,x")
	msg := fmt.Sprint(err)
	for _, want := range append([]string{`"traner"`, `"x"`}, KnownRoles()...) {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %s", msg, want)
		}
	}
}

func TestValidateNodes(t *testing.T) {
	cases := []struct {
		name  string
		nodes []Node
		want  []error
		say   []string
	}{
		{"ok", []Node{{Name: "a", Roles: []string{"engine"}}, {Name: "b", Roles: []string{"all"}, GPUs: 8}}, nil, nil},
		{"duplicate names", []Node{{Name: "a", Roles: []string{"engine"}}, {Name: "b", Roles: []string{"engine"}}, {Name: "a", Roles: []string{"trainer"}}},
			[]error{ErrDuplicateNode}, []string{`"a"`, "#0", "#2", "--name"}},
		{"empty name", []Node{{Roles: []string{"engine"}}}, []error{ErrBadNode}, []string{"#0"}},
		{"negative gpus", []Node{{Name: "a", Roles: []string{"engine"}, GPUs: -1}}, []error{ErrBadNode}, []string{"-1"}},
		{"unknown role names the node", []Node{{Name: "n7", Roles: []string{"enigne"}}}, []error{ErrUnknownRole}, []string{"n7", "enigne"}},
		{"every problem at once", []Node{{Name: "a", Roles: []string{"bogus"}}, {Name: "a", Roles: []string{"engine"}}},
			[]error{ErrUnknownRole, ErrDuplicateNode}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateNodes(tc.nodes)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("err = %v, want %v", err, w)
				}
			}
			for _, s := range tc.say {
				if !strings.Contains(fmt.Sprint(err), s) {
					t.Errorf("err %q does not say %s", err, s)
				}
			}
		})
	}
}

func TestPlace(t *testing.T) {
	n := func(name string, gpus int, roles ...string) Node { return Node{Name: name, Roles: roles, GPUs: gpus} }
	cases := []struct {
		name    string
		nodes   []Node
		holders map[string]string
		// want is "trainer=X(standbys) publisher=Y(...) controller=Z(...)".
		want string
	}{
		{"most GPUs wins the trainer; publisher and controller follow it",
			[]Node{n("a", 2, "all"), n("b", 8, "all"), n("c", 8, "engine")},
			nil, "trainer=b[a] publisher=b[a] controller=b[a]"},
		{"tie on GPUs breaks by name",
			[]Node{n("z", 4, "trainer"), n("m", 4, "trainer"), n("q", 4, "trainer")},
			nil, "trainer=m[q z] publisher=-[] controller=m[q z]"},
		{"the lease holder keeps the role even with fewer GPUs",
			[]Node{n("a", 1, "trainer", "publisher"), n("b", 8, "trainer", "publisher")},
			map[string]string{Trainer: "a"}, "trainer=a[b] publisher=a[b] controller=a[b]"},
		{"a holder that is no longer eligible is ignored",
			[]Node{n("a", 1, "engine"), n("b", 8, "trainer")},
			map[string]string{Trainer: "a"}, "trainer=b[] publisher=-[] controller=b[]"},
		{"a holder that left is ignored",
			[]Node{n("b", 0, "trainer"), n("c", 0, "trainer")},
			map[string]string{Trainer: "gone"}, "trainer=b[c] publisher=-[] controller=b[c]"},
		{"publisher elsewhere when the trainer's node does not run it",
			[]Node{n("t", 8, "trainer"), n("p1", 0, "publisher"), n("p2", 2, "publisher")},
			nil, "trainer=t[] publisher=p2[p1] controller=t[]"},
		{"publisher lease holder beats co-location",
			[]Node{n("t", 8, "trainer", "publisher"), n("p", 0, "publisher")},
			map[string]string{Publisher: "p"}, "trainer=t[] publisher=p[t] controller=t[]"},
		{"an explicit controller role is preferred over the fallback, GPUs ignored",
			[]Node{n("t", 8, "trainer"), n("c2", 0, "controller"), n("c1", 4, "controller")},
			nil, "trainer=t[] publisher=-[] controller=c1[c2]"},
		{"no singleton roles at all",
			[]Node{n("e1", 8, "engine"), n("e2", 8, "engine", "router")},
			nil, "trainer=-[] publisher=-[] controller=-[]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Place(tc.nodes, tc.holders)
			if err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, a := range p.Assignments {
				node := a.Node
				if node == "" {
					node = "-"
				}
				parts = append(parts, fmt.Sprintf("%s=%s%v", a.Role, node, a.Standbys))
			}
			if got := strings.Join(parts, " "); got != tc.want {
				t.Fatalf("plan %s\nwant %s", got, tc.want)
			}
			// Same inputs in another order: same plan (every node agrees).
			rev := append([]Node(nil), tc.nodes...)
			for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
				rev[i], rev[j] = rev[j], rev[i]
			}
			p2, _ := Place(rev, tc.holders)
			if fmt.Sprint(p2) != fmt.Sprint(p) {
				t.Fatalf("plan depends on member order:\n%v\n%v", p, p2)
			}
		})
	}
}

func TestPlaceRejectsBadMembers(t *testing.T) {
	_, err := Place([]Node{{Name: "a", Roles: []string{"trainer"}}, {Name: "a", Roles: []string{"engine"}}}, nil)
	if !errors.Is(err, ErrDuplicateNode) {
		t.Fatalf("err = %v, want ErrDuplicateNode", err)
	}
}

func TestPlanHelpers(t *testing.T) {
	p, _ := Place([]Node{{Name: "a", Roles: []string{"trainer"}}}, nil)
	if p.Node(Trainer) != "a" || p.Node(Publisher) != "" || p.Node("engine") != "" {
		t.Fatalf("Node lookups wrong: %+v", p)
	}
	if fmt.Sprint(p.Unplaced()) != "[publisher]" {
		t.Fatalf("Unplaced = %v", p.Unplaced())
	}
	if !IsSingleton(Trainer) || IsSingleton(Engine) {
		t.Fatal("IsSingleton wrong")
	}
}
