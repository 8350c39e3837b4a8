package memhub

import (
	"fmt"
	"slices"
	"time"

	"github.com/asyncrl/asyncrl/transport"
)

// FaultKind is what a fault rule does to the deliveries it selects.
type FaultKind int

// Fault kinds.
const (
	// Drop loses the delivery.
	Drop FaultKind = iota + 1
	// Delay postpones the delivery in virtual time.
	Delay
	// Duplicate delivers extra copies.
	Duplicate
	// Reorder holds deliveries in a window and releases them shuffled.
	Reorder
)

func (k FaultKind) String() string {
	switch k {
	case Drop:
		return "drop"
	case Delay:
		return "delay"
	case Duplicate:
		return "duplicate"
	case Reorder:
		return "reorder"
	}
	return fmt.Sprintf("FaultKind(%d)", int(k))
}

// Selector picks the deliveries a fault applies to. A delivery is one
// message on its way from the publishing node to one subscription's node.
type Selector struct {
	// Subject is a NATS pattern ('*', '>') the message's subject must match;
	// "" matches every subject.
	Subject string
	// From lists the publishing nodes affected; empty means any.
	From []string
	// To lists the receiving nodes affected; empty means any.
	To []string
}

func (s Selector) matches(subject, from, to string) bool {
	if s.Subject != "" && !transport.SubjectMatches(s.Subject, subject) {
		return false
	}
	if len(s.From) > 0 && !slices.Contains(s.From, from) {
		return false
	}
	if len(s.To) > 0 && !slices.Contains(s.To, to) {
		return false
	}
	return true
}

// Fault is one fault-injection rule.
type Fault struct {
	// Kind of fault.
	Kind FaultKind
	// Match selects the deliveries affected.
	Match Selector
	// Probability that a selected delivery is affected, in [0, 1]; 0 means
	// always (so the zero value is "every matching delivery").
	Probability float64
	// Delay (Delay faults) postpones by exactly Delay, or by a uniformly
	// random duration in [0, Delay] when RandomDelay is set.
	Delay       time.Duration
	RandomDelay bool
	// Copies (Duplicate faults) is how many extra copies arrive; default 1.
	Copies int
	// Window (Reorder faults) is how many deliveries to one subscription are
	// collected before being released in a shuffled order; default 4. A
	// partial window is released by Drain or Flush.
	Window int
}

// FaultID identifies an installed fault for RemoveFault.
type FaultID uint64

type faultRule struct {
	id FaultID
	f  Fault
}

func (f Fault) validate() error {
	switch f.Kind {
	case Drop, Delay, Duplicate, Reorder:
	default:
		return fmt.Errorf("memhub: Fault.Kind %v unknown (allowed: Drop, Delay, Duplicate, Reorder)", f.Kind)
	}
	if !(f.Probability >= 0 && f.Probability <= 1) { // NaN too: it would never hit
		return fmt.Errorf("memhub: Fault.Probability %v out of range (allowed 0..1, 0 means always)", f.Probability)
	}
	if f.Match.Subject != "" {
		if err := transport.ValidatePattern(f.Match.Subject); err != nil {
			return fmt.Errorf("memhub: Fault.Match.Subject: %w", err)
		}
	}
	if f.Kind == Delay && f.Delay <= 0 {
		return fmt.Errorf("memhub: Fault.Delay %v: must be > 0 for a Delay fault", f.Delay)
	}
	if f.Copies < 0 {
		return fmt.Errorf("memhub: Fault.Copies %d: must be >= 0", f.Copies)
	}
	if f.Window < 0 || f.Window == 1 {
		return fmt.Errorf("memhub: Fault.Window %d: must be 0 (default 4) or >= 2", f.Window)
	}
	return nil
}

// AddFault installs a fault rule. Rules apply in the order drop, duplicate,
// delay, reorder, and within a kind in the order they were added.
func (h *Hub) AddFault(f Fault) (FaultID, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	if f.Kind == Duplicate && f.Copies == 0 {
		f.Copies = 1
	}
	if f.Kind == Reorder && f.Window == 0 {
		f.Window = 4
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextFault++
	id := h.nextFault
	h.faults = append(h.faults, &faultRule{id: id, f: f})
	return id, nil
}

// MustAddFault is AddFault for tests; it panics on an invalid rule.
func (h *Hub) MustAddFault(f Fault) FaultID {
	id, err := h.AddFault(f)
	if err != nil {
		panic(err)
	}
	return id
}

// RemoveFault uninstalls a rule. Deliveries already held in its reorder
// windows are released at once, in their original order.
func (h *Hub) RemoveFault(id FaultID) {
	defer h.kick() // auto mode: deliver what was held
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = slices.DeleteFunc(h.faults, func(r *faultRule) bool { return r.id == id })
	for _, k := range h.reorderKeys() {
		if k.rule == id {
			for _, d := range h.reorder[k] {
				h.pushDeliveryLocked(d)
			}
			delete(h.reorder, k)
		}
	}
}

// ClearFaults removes every fault rule (not partitions).
func (h *Hub) ClearFaults() {
	h.mu.Lock()
	ids := make([]FaultID, 0, len(h.faults))
	for _, r := range h.faults {
		ids = append(ids, r.id)
	}
	h.mu.Unlock()
	for _, id := range ids {
		h.RemoveFault(id)
	}
}

// Partition splits the listed nodes into groups that cannot reach each
// other: a message from a node in one group to a node in another is lost
// (core NATS is at-most-once). Nodes not listed are unaffected, and a node
// always reaches itself. A new Partition replaces the previous one.
func (h *Hub) Partition(groups ...[]string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.partition = map[string]int{}
	for i, g := range groups {
		for _, n := range g {
			h.partition[n] = i
		}
	}
}

// Heal removes the partition.
func (h *Hub) Heal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.partition = nil
}

func (h *Hub) reachableLocked(from, to string) bool {
	if from == to || h.partition == nil {
		return true
	}
	gf, okf := h.partition[from]
	gt, okt := h.partition[to]
	return !okf || !okt || gf == gt
}

// hits decides, drawing from the seeded rng only when needed, whether rule r
// affects this delivery.
func (h *Hub) hitsLocked(r *faultRule, subject, from, to string) bool {
	if !r.f.Match.matches(subject, from, to) {
		return false
	}
	p := r.f.Probability
	if p == 0 || p == 1 {
		return true
	}
	return h.rng.Float64() < p
}

// applyFaultsLocked turns one delivery into zero or more scheduled ones.
func (h *Hub) applyFaultsLocked(d *delivery) {
	subj, from, to := d.msg.Subject, d.from, d.sub.node
	if !h.reachableLocked(from, to) {
		h.logLocked(Event{Kind: EvDrop, Msg: d.id, Subject: subj, From: from, To: to, Sub: d.sub.id, Detail: "partition"})
		return
	}
	if len(h.faults) == 0 {
		// No rules: one copy, due now (what the loops below come to).
		d.at = h.now
		h.pushDeliveryLocked(d)
		return
	}
	for _, r := range h.faults {
		if r.f.Kind == Drop && h.hitsLocked(r, subj, from, to) {
			h.logLocked(Event{Kind: EvDrop, Msg: d.id, Subject: subj, From: from, To: to, Sub: d.sub.id, Detail: fmt.Sprintf("rule %d", r.id)})
			return
		}
	}
	copies := []*delivery{d}
	for _, r := range h.faults {
		if r.f.Kind == Duplicate && h.hitsLocked(r, subj, from, to) {
			for i := 0; i < r.f.Copies; i++ {
				c := *d
				c.copy = len(copies)
				copies = append(copies, &c)
			}
			h.logLocked(Event{Kind: EvDuplicate, Msg: d.id, Subject: subj, From: from, To: to, Sub: d.sub.id, Detail: fmt.Sprintf("rule %d, +%d", r.id, r.f.Copies)})
		}
	}
	for _, c := range copies {
		c.at = h.now
		for _, r := range h.faults {
			if r.f.Kind == Delay && h.hitsLocked(r, subj, from, to) {
				delay := r.f.Delay
				if r.f.RandomDelay {
					delay = time.Duration(h.rng.Int63n(int64(r.f.Delay) + 1))
				}
				c.at = c.at.Add(delay)
				h.logLocked(Event{Kind: EvDelay, Msg: d.id, Subject: subj, From: from, To: to, Sub: d.sub.id, Detail: fmt.Sprintf("rule %d, %s", r.id, delay)})
			}
		}
		held := false
		for _, r := range h.faults {
			if r.f.Kind == Reorder && h.hitsLocked(r, subj, from, to) {
				k := reorderKey{rule: r.id, sub: d.sub.id}
				h.reorder[k] = append(h.reorder[k], c)
				if len(h.reorder[k]) >= r.f.Window {
					h.releaseWindowLocked(k)
				}
				held = true
				break
			}
		}
		if !held {
			h.pushDeliveryLocked(c)
		}
	}
}

type reorderKey struct {
	rule FaultID
	sub  uint64
}

func (h *Hub) reorderKeys() []reorderKey {
	keys := make([]reorderKey, 0, len(h.reorder))
	for k := range h.reorder {
		keys = append(keys, k)
	}
	// Map order is random; sort so releases are deterministic.
	slices.SortFunc(keys, func(a, b reorderKey) int {
		if a.rule != b.rule {
			return int(a.rule) - int(b.rule)
		}
		return int(a.sub) - int(b.sub)
	})
	return keys
}

// releaseWindowLocked shuffles a window with the seeded rng and schedules
// it. All deliveries of the window become due at the latest of their times,
// so the shuffled order is the delivery order.
func (h *Hub) releaseWindowLocked(k reorderKey) {
	w := h.reorder[k]
	delete(h.reorder, k)
	if len(w) == 0 {
		return
	}
	h.rng.Shuffle(len(w), func(i, j int) { w[i], w[j] = w[j], w[i] })
	at := h.now
	for _, d := range w {
		if d.at.After(at) {
			at = d.at
		}
	}
	ids := make([]string, len(w))
	for i, d := range w {
		d.at = at
		ids[i] = fmt.Sprint(d.id)
		h.pushDeliveryLocked(d)
	}
	h.logLocked(Event{Kind: EvReorder, Subject: w[0].msg.Subject, Sub: k.sub, Detail: fmt.Sprintf("rule %d, order %v", k.rule, ids)})
}

// flushReorderLocked releases every partial window; it reports how many
// deliveries it released.
func (h *Hub) flushReorderLocked() int {
	n := 0
	for _, k := range h.reorderKeys() {
		n += len(h.reorder[k])
		h.releaseWindowLocked(k)
	}
	return n
}
