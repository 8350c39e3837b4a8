package contender

import (
	"encoding/json"
	"fmt"
)

// Holding is what the lease key says: who holds it, and the term's token.
type Holding struct {
	Holder string `json:"holder"`
	// Instance names the contender (one elector of one process) that
	// wrote the key: a node that restarts keeps its Holder but is another
	// instance, so it never takes up a Create of its previous life as its
	// own (JudgeTaken). Empty in keys written before it existed.
	Instance string `json:"instance,omitempty"`
	// Token is the revision at which the holder acquired the lease.
	Token uint64 `json:"token"`
	// Revision is the key's current revision (Token or a later renewal).
	Revision uint64 `json:"-"`
}

// Encode is the key's value for h (Revision is not stored). Token is 0
// for the acquiring Create: the token is the revision Create returns,
// unknown in advance, so the first write records the holder and the
// renewal right after it records the token.
func Encode(h Holding) []byte {
	b, _ := json.Marshal(h) // strings and an integer always encode
	return b
}

// Decode reads the key's value at revision. A value without a token is
// the acquiring Create itself, whose revision is the token: its Holding
// has Token == Revision (a renewal always lands past its term's token).
func Decode(value []byte, revision uint64) (Holding, error) {
	var h Holding
	if err := json.Unmarshal(value, &h); err != nil {
		return Holding{}, fmt.Errorf("lease: decode the key's value %q: %w", value, err)
	}
	h.Revision = revision
	if h.Token == 0 {
		h.Token = revision
	}
	return h, nil
}

// Refusal is the verdict on a write the server refused, from a read of
// the lease key after it.
type Refusal int

const (
	// RefusalLost: the key is gone or holds another term; the lease is lost
	// (a refused Create: taken by someone else).
	RefusalLost Refusal = iota
	// RefusalLanded: the key holds this contender's own write that timed
	// out here but landed — for a renewal, its term past the refused
	// revision (Resynced adopts it); for a Create, its own untokened
	// Create of a term newer than any it had (Taken confirms it).
	RefusalLanded
	// RefusalReadAgain: the key shows this term at the refused revision
	// or older, which the server has just refused: the read came from a
	// replica that has not applied the newest write yet.
	RefusalReadAgain
)

func (r Refusal) String() string {
	switch r {
	case RefusalLost:
		return "lost"
	case RefusalLanded:
		return "landed"
	case RefusalReadAgain:
		return "read again"
	}
	return fmt.Sprintf("Refusal(%d)", int(r))
}

// JudgeRefusal judges a renewal at rev of holder's term token that the
// server refused, from the key as read (found false: no key). A term's
// token is a revision, never reused, so a key holding this holder's name
// and this term's token was written by this term's own renewal (a node
// restarted under the same name has a new instance and a new term's
// token; the instance matters only for a Create, JudgeTaken).
func JudgeRefusal(key Holding, found bool, holder string, token, rev uint64) Refusal {
	switch {
	case !found || key.Holder != holder || key.Token != token:
		return RefusalLost
	case key.Revision > rev:
		return RefusalLanded
	default:
		return RefusalReadAgain
	}
}

// JudgeTaken judges a Create of contender self (Holder and Instance) that
// the server refused because the key exists, from the key as read:
// RefusalLanded when it is self's own Create not yet renewed (Token ==
// Revision) of a term newer than last, the newest token self had — its
// earlier Create, timed out here, landed; else RefusalLost (another
// contender's key — another holder, or the same node in an earlier life
// — or a term self already had and must not take up again: a token is
// never reused). A stale replica's read is taken for RefusalLost: the
// next attempt, a RenewInterval later, reads again.
func JudgeTaken(key Holding, found bool, self Holding, last uint64) Refusal {
	if found && self.Instance != "" && key.Holder == self.Holder && key.Instance == self.Instance &&
		key.Token == key.Revision && key.Revision > last {
		return RefusalLanded
	}
	return RefusalLost
}
