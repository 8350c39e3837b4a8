package clustertest

import (
	"fmt"
	"regexp"
	"strconv"
)

// LedgerLine matches a node's durable-ledger line; its groups are the
// prompts, trained, filtered, requeued, in-flight and refused counts.
var LedgerLine = regexp.MustCompile(`ledger prompts (\d+) trained (\d+) filtered (\d+) requeued (\d+) in_flight (\d+) refused (\d+)`)

// CheckLedgerLine reads the finishing node's durable-ledger line in out
// ("ledger prompts P trained T filtered F requeued R in_flight I refused
// X") and says what is wrong with it: a run of steps steps at mini-batch b
// trains exactly steps·b prompts (none twice), leaves none in flight and
// none refused, and accounts for every prompt (T+F+R = P).
func CheckLedgerLine(out string, steps, b int) error {
	m := LedgerLine.FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("no ledger line in:\n%s", out)
	}
	n := make([]int, 7)
	for i := 1; i < 7; i++ {
		n[i], _ = strconv.Atoi(m[i])
	}
	if n[2] != steps*b || n[5] != 0 || n[6] != 0 || n[2]+n[3]+n[4] != n[1] {
		return fmt.Errorf("final ledger %q; want %d trained (B=%d per step, none twice), none in flight, none refused", m[0], steps*b, b)
	}
	return nil
}
