package status

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/cluster"
	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/asyncrl/asyncrl/cluster/ledger"
	"github.com/asyncrl/asyncrl/cluster/placement"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// Watcher feeds a View from the bus (see the package doc). Its methods
// are safe for concurrent use.
type Watcher struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	plan transport.RunPlan
	now  func() time.Time

	mu       sync.Mutex
	view     *View
	base     *nats.Subscription
	termSubs []*nats.Subscription
	closed   bool
}

// NewWatcher watches run on nc (which the caller owns and closes after
// Close); now is the clock (time.Now in the command, a fake in tests).
func NewWatcher(nc *nats.Conn, run string, now func() time.Time) (*Watcher, error) {
	plan, err := transport.Plan(run)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("status: jetstream: %w", err)
	}
	w := &Watcher{nc: nc, js: js, plan: plan, now: now, view: NewView(run, 0)}
	if w.base, err = nc.Subscribe(plan.TermAnnounce, w.onMsg); err != nil {
		return nil, fmt.Errorf("status: subscribe %s: %w", plan.TermAnnounce, err)
	}
	return w, nil
}

// onMsg decodes one message and feeds it; a new term moves the term
// subscriptions (NATS runs one callback at a time per subscription, and
// the mutex orders the rest).
func (w *Watcher) onMsg(m *nats.Msg) {
	msg, err := messages.Decode(m.Data)
	if err != nil {
		return // not ours to judge: the run's own receivers log bad frames
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	if w.view.Observe(w.now(), msg) {
		w.followTerm(w.view.Term())
	}
}

// followTerm subscribes to term's subjects, dropping the previous term's.
// Called with mu held.
func (w *Watcher) followTerm(term string) {
	for _, s := range w.termSubs {
		_ = s.Unsubscribe()
	}
	w.termSubs = w.termSubs[:0]
	p, err := transport.Plan(term)
	if err != nil {
		w.view.SetProblem("term", fmt.Sprintf("announced term %q: %v", term, err))
		return
	}
	for _, subj := range []string{p.Steps, p.Capacity, p.EnginesAll, p.RolloutStatusAll} {
		s, err := w.nc.Subscribe(subj, w.onMsg)
		if err != nil {
			w.view.SetProblem("subscribe "+subj, err.Error())
			continue
		}
		w.view.SetProblem("subscribe "+subj, "")
		w.termSubs = append(w.termSubs, s)
	}
}

// Poll reads the members, the trainer lease and the durable progress
// from their KV buckets; what cannot be read becomes a problem line of
// the snapshot, not an error (a cluster still starting has no buckets).
func (w *Watcher) Poll(ctx context.Context) {
	ms, merr := w.members(ctx)
	l, lerr := w.lease(ctx)
	p, perr := w.progress(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if merr == nil {
		w.view.SetMembers(ms)
	}
	if lerr == nil {
		w.view.SetLease(l)
	}
	if perr == nil {
		w.view.SetProgress(p)
	}
	w.view.SetProblem("members", errText(merr))
	w.view.SetProblem("lease", errText(lerr))
	w.view.SetProblem("progress", errText(perr))
}

// Snapshot is the view now.
func (w *Watcher) Snapshot() Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.view.Snapshot(w.now())
}

// Close unsubscribes; the connection stays the caller's.
func (w *Watcher) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, s := range append(w.termSubs, w.base) {
		_ = s.Unsubscribe()
	}
	w.termSubs = nil
}

// members lists the live name claims: cluster.ClaimName's keys are
// "n_" + base64url(name), each holding the claiming instance.
func (w *Watcher) members(ctx context.Context) ([]Member, error) {
	kv, err := w.bucket(ctx, cluster.NamesBucket)
	if err != nil {
		return nil, err
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", cluster.NamesBucket, err)
	}
	var ms []Member
	for k := range keys.Keys() {
		raw, ok := strings.CutPrefix(k, "n_")
		if !ok {
			continue
		}
		name, err := base64.RawURLEncoding.DecodeString(raw)
		if err != nil {
			continue
		}
		m := Member{Name: string(name)}
		var h contender.Holding
		if ent, err := kv.Get(ctx, k); err == nil && json.Unmarshal(ent.Value(), &h) == nil {
			m.Instance = h.Holder
		} else if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired between the listing and the read
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// TrainerLeaseKey is the trainer lease's key in lease.DefaultBucket: the
// node agent contends for lease.DefaultConfig(<run>-trainer, name).
func TrainerLeaseKey(run string) string { return run + "-" + placement.Trainer }

func (w *Watcher) lease(ctx context.Context) (*Lease, error) {
	var h contender.Holding
	ok, err := w.readJSON(ctx, lease.DefaultBucket, TrainerLeaseKey(w.plan.Run), &h)
	if err != nil || !ok {
		return nil, err
	}
	return &Lease{Holder: h.Holder, Token: h.Token}, nil
}

func (w *Watcher) progress(ctx context.Context) (*Progress, error) {
	var p ledger.Progress
	ok, err := w.readJSON(ctx, w.plan.ProgressBucket, ledger.ProgressKey, &p)
	if err != nil || !ok {
		return nil, err
	}
	return &Progress{Step: p.Step, Version: p.Version, Checkpoint: p.Checkpoint, Holder: p.Holder, Token: p.Token}, nil
}

// readJSON reads key of bucket into v; ok is false when the key is
// absent (expired or never written), which is an answer, not an error.
func (w *Watcher) readJSON(ctx context.Context, bucket, key string, v any) (ok bool, err error) {
	kv, err := w.bucket(ctx, bucket)
	if err != nil {
		return false, err
	}
	ent, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s/%s: %w", bucket, key, err)
	}
	if err := json.Unmarshal(ent.Value(), v); err != nil {
		return false, fmt.Errorf("read %s/%s: %w", bucket, key, err)
	}
	return true, nil
}

func (w *Watcher) bucket(ctx context.Context, name string) (jetstream.KeyValue, error) {
	kv, err := w.js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("bucket %s does not exist (no node of this run has started on this bus, or --run names another run)", name)
	}
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", name, err)
	}
	return kv, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
