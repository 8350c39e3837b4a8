package sampling

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// refs is the shell's side of batches by reference: decode turns a stored
// GroupReady into one that references its stored message, and watch
// deletes that message once the controller settled the group.
//
// What keeps a referenced message alive until its step is trained: the
// trajectory buffer keeps every message (limits retention, MaxAge) until
// this actor deletes it, and it deletes a group only on the controller's
// PromptLedger that settles it — trained (sent after the step's StepDone:
// no trainer fetches it again; a retransmission of a trained step is
// answered without fetching), filtered, or requeued. A trainer that
// fails over within the run fetches a retransmitted batch's groups from
// the same buffer; a new cluster term has a buffer of its own and
// requeues the prompts the old term had in flight, so no reference
// crosses terms. A deletion lost (a full queue, this actor restarted) is
// reclaimed by the buffer's MaxAge.
type refs struct {
	del     transport.StoredReader // nil: the stream cannot delete
	log     *actors.LimitedLogger
	mu      sync.Mutex
	held    *Held // the pure rule: which stored groups stay
	deleted int
	closed  bool // queue is closed (stop)
	queue   chan uint64
	done    chan struct{}
	sub     transport.Subscription
	once    sync.Once
}

// deleteQueue bounds the deletions waiting for the deleting goroutine;
// beyond it a deletion is skipped (MaxAge reclaims the message).
const deleteQueue = 4096

func newRefs(st transport.Stream, log zerolog.Logger) *refs {
	r := &refs{held: NewHeld(), queue: make(chan uint64, deleteQueue), done: make(chan struct{}),
		log: actors.NewLimitedLogger(log, actors.RealClock{}, 10*time.Second)}
	r.del, _ = st.(transport.StoredReader)
	go r.deleting()
	return r
}

// decode decodes a stored message; a GroupReady with its batch inline
// becomes a reference to this message (subject and sequence, the batch's
// size and checksum as the rollout actor packed them).
func (r *refs) decode(m *transport.StreamMsg) (messages.Message, error) {
	msg, err := messages.Decode(m.Data)
	if err != nil {
		return nil, err
	}
	g, ok := msg.(messages.GroupReady)
	if !ok {
		return msg, nil
	}
	g, ok = Reference(g, m.Subject, m.Sequence)
	if !ok {
		return msg, nil
	}
	r.mu.Lock()
	r.held.Keep(g.GroupID, m.Sequence)
	r.mu.Unlock()
	return g, nil
}

// watch subscribes to the ledger subject: a settled group's stored
// message is queued for deletion.
func (r *refs) watch(bus transport.Bus, ledger string) error {
	sub, err := bus.Subscribe(ledger, func(m *transport.Msg) {
		l, err := messages.DecodeAs[messages.PromptLedger](m.Data)
		if err != nil {
			return // other kinds share the subject tree
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		seq, ok := r.held.Settle(l)
		if !ok || r.del == nil || r.closed {
			return
		}
		select { // never blocks: the lock is held
		case r.queue <- seq:
		default:
			r.log.Warn("delete-queue").Uint64("seq", seq).Msg("sampling: deletion queue full; the group stays in the buffer until its max age")
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", ledger, err)
	}
	r.sub = sub
	return nil
}

// deleting deletes queued sequences off the bus's delivery goroutine (a
// memhub handler may run inside the publisher's call).
func (r *refs) deleting() {
	defer close(r.done)
	for seq := range r.queue {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := r.del.DeleteMsg(ctx, seq)
		cancel()
		if err != nil {
			r.log.Warn("delete").Err(err).Uint64("seq", seq).Msg("sampling: deleting a settled group from the trajectory buffer failed; its max age reclaims it")
			continue
		}
		r.mu.Lock()
		r.deleted++
		r.mu.Unlock()
	}
}

func (r *refs) counts() (deleted, held int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.deleted, r.held.Len()
}

// stop ends the ledger subscription and waits for queued deletions.
func (r *refs) stop() {
	r.once.Do(func() {
		if r.sub != nil {
			_ = r.sub.Unsubscribe()
		}
		r.mu.Lock()
		r.closed = true
		close(r.queue)
		r.mu.Unlock()
		<-r.done
	})
}
