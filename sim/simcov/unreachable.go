package simcov

import "strings"

// Exclusion names blocks no simulated input can reach: those of function
// Func in File whose source contains Contains (every block of the
// function when Contains is empty), and why.
type Exclusion struct {
	File, Func, Contains, Why string
}

// Unreachable are the blocks of the cores that no simulated input can
// reach, each with its reason. A block listed here that a seed does reach
// is reported (Report.Details marks it), so the list cannot silently go
// stale.
var Unreachable = []Exclusion{}

func matchExclusion(b Block, src string) *Exclusion {
	for i := range Unreachable {
		e := &Unreachable[i]
		if e.File == b.File && e.Func == b.Func && (e.Contains == "" || strings.Contains(src, e.Contains)) {
			return e
		}
	}
	return nil
}
