package clustertest

import "testing"

// CheckLedgerLine passes a clean run's line and fails each way a run can
// go wrong.
func TestCheckLedgerLine(t *testing.T) {
	for line, ok := range map[string]bool{
		"ledger prompts 44 trained 24 filtered 0 requeued 20 in_flight 0 refused 0": true,
		"ledger prompts 48 trained 28 filtered 0 requeued 20 in_flight 0 refused 0": false, // a step trained twice
		"ledger prompts 44 trained 24 filtered 0 requeued 19 in_flight 1 refused 0": false,
		"ledger prompts 44 trained 24 filtered 0 requeued 20 in_flight 0 refused 1": false,
		"ledger prompts 45 trained 24 filtered 0 requeued 20 in_flight 0 refused 0": false, // one unaccounted for
		"run complete at step 6": false,
	} {
		if err := CheckLedgerLine("node n1: "+line+"\n", 6, 4); (err == nil) != ok {
			t.Errorf("%q: %v, want ok=%v", line, err, ok)
		}
	}
}
