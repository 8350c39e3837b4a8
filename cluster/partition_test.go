package cluster

import (
	"strings"
	"testing"
)

func TestDecideQuorum(t *testing.T) {
	abc := []string{"a", "b", "c"}
	abcd := []string{"a", "b", "c", "d"}
	cases := []struct {
		name             string
		known, reachable []string
		train            bool
		need             int
		say              string
	}{
		{"single node", []string{"a"}, []string{"a"}, true, 1, "majority"},
		{"all three", abc, abc, true, 2, "majority"},
		{"two of three", abc, []string{"a", "c"}, true, 2, "majority"},
		{"one of three stops", abc, []string{"b"}, false, 2, "minority"},
		{"three of four", abcd, []string{"b", "c", "d"}, true, 3, "majority"},
		{"even split with the lowest name trains", abcd, []string{"a", "d"}, true, 3, "even split"},
		{"even split without it stops", abcd, []string{"b", "c"}, false, 3, "minority"},
		{"two nodes: the lower-named one alone trains", []string{"a", "b"}, []string{"a"}, true, 2, "even split"},
		{"two nodes: the other alone stops", []string{"a", "b"}, []string{"b"}, false, 2, "minority"},
		{"strangers do not count", abc, []string{"a", "x", "y"}, false, 2, "minority"},
		{"duplicates do not count twice", abc, []string{"a", "a"}, false, 2, "minority"},
		{"nobody known", nil, []string{"a"}, false, 1, "no known"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := DecideQuorum(tc.known, tc.reachable)
			if v.Train != tc.train || v.Need != tc.need || !strings.Contains(v.Reason, tc.say) {
				t.Fatalf("verdict %+v, want train=%v need=%d reason ~ %q", v, tc.train, tc.need, tc.say)
			}
		})
	}
}

// Both sides of any split of one known set never both train.
func TestDecideQuorumNeverTwoWinners(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e"}
	for n := 1; n <= len(names); n++ {
		known := names[:n]
		for mask := 0; mask < 1<<n; mask++ {
			var left, right []string
			for i, k := range known {
				if mask&(1<<i) != 0 {
					left = append(left, k)
				} else {
					right = append(right, k)
				}
			}
			if DecideQuorum(known, left).Train && DecideQuorum(known, right).Train {
				t.Fatalf("known %v split %v | %v: both sides train", known, left, right)
			}
		}
	}
}

func TestQuorumTracksEvents(t *testing.T) {
	q := NewQuorum("a")
	q.Joined("b")
	q.Joined("c")
	if !q.Verdict().Train {
		t.Fatal("full cluster does not train")
	}
	q.Failed("b")
	if v := q.Verdict(); !v.Train || v.Known != 3 {
		t.Fatalf("after one failure: %+v, want train with 3 known", v)
	}
	q.Failed("c") // a is alone on its side of a partition
	if v := q.Verdict(); v.Train {
		t.Fatalf("minority side trains: %+v", v)
	}
	q.Joined("c") // partition heals
	if !q.Verdict().Train {
		t.Fatal("healed cluster does not train")
	}
	q.Left("b") // b leaves gracefully: two voters remain, both reachable
	if v := q.Verdict(); !v.Train || v.Known != 2 {
		t.Fatalf("after graceful leave: %+v", v)
	}
	q.Failed("c")
	q.Forget("c")
	if v := q.Verdict(); !v.Train || v.Known != 1 || strings.Join(q.Known(), ",") != "a" {
		t.Fatalf("after forgetting the dead: %+v known %v", v, q.Known())
	}
}
