package fence

import (
	"slices"
	"testing"
)

func groupsOf(es []Ended) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Group)
	}
	return out
}

// TestRule steps the rank host's rule through a term change, a
// holder's group restart, a late start of a deposed term, a holder's own
// kill and a departure.
func TestRule(t *testing.T) {
	f := NewRule()
	if ok, ended := f.Observe(1); !ok || ended != nil {
		t.Fatalf("first term: %v %v", ok, ended)
	}
	if ok, ended := f.Register("t1-g1", "a", 1); !ok || ended != nil {
		t.Fatalf("a's first group: %v %v", ok, ended)
	}
	// a restarts its group: g1 ends when g2 registers (a holder runs one).
	if ok, ended := f.Register("t1-g2", "a", 1); !ok || !slices.Equal(groupsOf(ended), []string{"t1-g1"}) {
		t.Fatalf("a's second group: %v ended %v, want t1-g1", ok, groupsOf(ended))
	}
	if _, ended := f.Register("x-g1", "c", 1); ended != nil { // another owner's group stays apart
		t.Fatalf("c's group ended %v", groupsOf(ended))
	}
	// b's newer term ends every group of term 1 before it is served.
	ok, ended := f.Observe(2)
	if !ok || f.Token() != 2 || !slices.Equal(groupsOf(ended), []string{"t1-g2", "x-g1"}) {
		t.Fatalf("term 2: %v token %d ended %v, want t1-g2 x-g1", ok, f.Token(), groupsOf(ended))
	}
	// The deposed term is refused, its late start recorded nowhere.
	if ok, _ := f.Observe(1); ok {
		t.Fatal("term 1 served after term 2")
	}
	if ok, ended := f.Register("t1-g3", "a", 1); ok || ended != nil {
		t.Fatalf("a late start of term 1: %v %v", ok, ended)
	}
	// Re-registering an id ends what it named before.
	f.Register("t2-g1", "b", 2)
	if _, ended := f.Register("t2-g1", "b", 2); !slices.Equal(groupsOf(ended), []string{"t2-g1"}) {
		t.Fatalf("same id again ended %v", groupsOf(ended))
	}
	f.Register("t2-o", "d", 2)
	f.Remove("t2-o") // its holder killed its last rank
	if got := f.Departed(func(string) bool { return false }); !slices.Equal(groupsOf(got), []string{"t2-g1"}) {
		t.Fatalf("departed %v, want only t2-g1 (t2-o was removed)", groupsOf(got))
	}
	if got := f.Departed(func(string) bool { return false }); got != nil {
		t.Fatalf("departed twice: %v", groupsOf(got))
	}
}
