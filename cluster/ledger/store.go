package ledger

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/lease/contender"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// ErrBadConfig is returned for an invalid Config.
var ErrBadConfig = errors.New("ledger: bad config")

// Config configures the durable ledger of one run.
type Config struct {
	// Run is the run id (letters, digits, '-', '_'); it names the buckets
	// and the stream, so runs never share state.
	Run string
	// Replicas is the replication factor of the buckets and the stream in a
	// clustered JetStream (3 on three nodes: the state survives losing one
	// node, and a minority side cannot write). Default 1.
	Replicas int
	// Memory keeps everything in memory (tests only: nothing survives a
	// server restart). Default false.
	Memory bool
	// GroupSubject is the subject the group buffer stream captures. It lies
	// outside asyncrl.<run>.groups.> on purpose: live subscribers of the
	// groups topic must not see the buffer's raw payloads. Default the
	// run's plan's DurableGroups ("asyncrl-durable.<run>.groups").
	GroupSubject string
	// DuplicateWindow is how long the buffer remembers group ids to drop a
	// re-appended group (default 10 minutes).
	DuplicateWindow time.Duration
	// CASRetries bounds the re-read/re-validate loop when another writer
	// changed a prompt's entry between our read and our write (default 8).
	CASRetries int
	// Logger receives the store's logs (default zerolog.Nop()).
	Logger zerolog.Logger
}

// DefaultConfig returns the defaults for run.
func DefaultConfig(run string) Config {
	plan, _ := transport.Plan(run) // a bad run id: Validate names it
	return Config{Run: run, Replicas: 1, GroupSubject: plan.DurableGroups,
		DuplicateWindow: 10 * time.Minute, CASRetries: 8, Logger: zerolog.Nop()}
}

// Validate names the field at fault and the allowed values.
func (c Config) Validate() error {
	if err := transport.ValidToken(c.Run); err != nil {
		return fmt.Errorf("%w: Run: %w", ErrBadConfig, err)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("%w: Replicas %d (allowed: 1..5)", ErrBadConfig, c.Replicas)
	}
	if err := transport.ValidateSubject(c.GroupSubject); err != nil {
		return fmt.Errorf("%w: GroupSubject: %w", ErrBadConfig, err)
	}
	if c.DuplicateWindow <= 0 {
		return fmt.Errorf("%w: DuplicateWindow %s (allowed: > 0)", ErrBadConfig, c.DuplicateWindow)
	}
	if c.CASRetries < 1 {
		return fmt.Errorf("%w: CASRetries %d (allowed: >= 1)", ErrBadConfig, c.CASRetries)
	}
	return nil
}

// Ledger is the durable state of one run on JetStream.
type Ledger struct {
	cfg      Config
	log      zerolog.Logger
	js       jetstream.JetStream
	prompts  jetstream.KeyValue
	progress jetstream.KeyValue
	groups   jetstream.Stream
	// promptsStream is the prompt bucket's stream (KV_<bucket>), read
	// from its leader when a replica's answer is in doubt.
	promptsStream, promptsBucket string
	// read is Record's first read of an entry (get; a test replaces it
	// with a replica that lags).
	read func(ctx context.Context, promptID string) (Entry, uint64, bool, error)
	// list is Entries' one pass over the bucket (listOnce; a test
	// replaces it with a replica that lags).
	list func(ctx context.Context) ([]Entry, uint64, error)
}

// ProgressKey is the progress bucket's one key (the fenced trainer
// progress); readers such as cluster/status read it without opening the
// ledger (Open creates the buckets).
const ProgressKey = progressKey

const progressKey = "trainer"

// Open creates (or opens) the run's buckets and stream on nc.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Ledger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("ledger: jetstream: %w", err)
	}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	l := &Ledger{cfg: cfg, log: cfg.Logger, js: js}
	kv := func(name, desc string) (jetstream.KeyValue, error) {
		b, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, Description: desc,
			History: 1, Storage: storage, Replicas: cfg.Replicas})
		if err != nil {
			return nil, fmt.Errorf("ledger: bucket %s: %w", name, err)
		}
		return b, nil
	}
	plan := transport.MustPlan(cfg.Run) // Validate checked the run id
	l.promptsBucket = plan.PromptsBucket
	l.promptsStream = "KV_" + l.promptsBucket // a KV bucket's stream (NATS's naming)
	l.read, l.list = l.get, l.listOnce
	if l.prompts, err = kv(l.promptsBucket, "asyncrl prompt ledger"); err != nil {
		return nil, err
	}
	if l.progress, err = kv(plan.ProgressBucket, "asyncrl trainer progress (fenced)"); err != nil {
		return nil, err
	}
	l.groups, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: plan.DurableGroupStream, Description: "asyncrl finished-group buffer",
		Subjects: []string{cfg.GroupSubject}, Storage: storage, Replicas: cfg.Replicas,
		Duplicates: cfg.DuplicateWindow, Retention: jetstream.LimitsPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: group buffer stream: %w", err)
	}
	return l, nil
}

// promptKey encodes a prompt id as a KV key: ids may hold characters KV
// keys cannot, and base64url output is always a valid key.
func promptKey(id string) string { return "p." + base64.RawURLEncoding.EncodeToString([]byte(id)) }

func decodeEntry(b []byte) (Entry, error) {
	m, err := messages.DecodeAs[messages.PromptLedger](b)
	if err != nil {
		return Entry{}, fmt.Errorf("ledger: decode entry: %w", err)
	}
	return m, nil
}

// Get returns a prompt's entry; ok is false when it was never recorded.
func (l *Ledger) Get(ctx context.Context, promptID string) (e Entry, ok bool, err error) {
	e, _, ok, err = l.get(ctx, promptID)
	return e, ok, err
}

func (l *Ledger) get(ctx context.Context, promptID string) (Entry, uint64, bool, error) {
	ent, err := l.prompts.Get(ctx, promptKey(promptID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, 0, false, nil
	}
	if err != nil {
		return Entry{}, 0, false, fmt.Errorf("ledger: read prompt %s: %w", promptID, err)
	}
	e, err := decodeEntry(ent.Value())
	return e, ent.Revision(), err == nil, err
}

// Record validates ev against the stored entry and stores it with a
// compare-and-set on the entry's revision, retrying on a concurrent write.
// An illegal transition returns an error wrapping ErrIllegalTransition and
// stores nothing.
func (l *Ledger) Record(ctx context.Context, ev messages.PromptLedger) (Entry, Outcome, error) {
	read := l.read
	for range l.cfg.CASRetries {
		prev, rev, exists, err := read(ctx, ev.PromptID)
		if err != nil {
			return Entry{}, Applied, err
		}
		next, out, err := Apply(prev, exists, ev)
		key := promptKey(ev.PromptID)
		if errors.Is(err, ErrIllegalTransition) {
			// With replicas, any server may answer a read (KV direct get)
			// and a follower can be behind: the verdict stands only if the
			// stream's leader agrees. For an entry read at rev, rewriting it
			// unchanged at rev tells (a revision mismatch: the read was
			// stale); for an entry read as absent, the leader is asked
			// (issue 37: a follower that had not applied a consumed
			// transition yet refused its trained mark as "trained before
			// it was consumed"). Stale: read again, from the leader.
			stale, cerr := l.confirmAbsent(ctx, ev.PromptID, exists)
			if exists {
				stale, cerr = l.confirm(ctx, key, prev, rev)
			}
			if cerr != nil {
				return Entry{}, Applied, cerr
			}
			if stale {
				read = l.leaderGet
				continue
			}
		}
		if err != nil || out == Duplicate {
			return next, out, err
		}
		data, err := messages.Encode(next)
		if err != nil {
			return Entry{}, Applied, fmt.Errorf("ledger: encode: %w", err)
		}
		if exists {
			_, err = l.prompts.Update(ctx, key, data, rev)
		} else {
			_, err = l.prompts.Create(ctx, key, data)
		}
		switch {
		case err == nil:
			return next, Applied, nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			continue // another writer won the race: re-read and re-validate
		default:
			return Entry{}, Applied, fmt.Errorf("ledger: write prompt %s: %w", ev.PromptID, err)
		}
	}
	return Entry{}, Applied, fmt.Errorf("ledger: prompt %s: still contended after %d attempts", ev.PromptID, l.cfg.CASRetries)
}

// confirmAbsent asks the prompt bucket's leader whether promptID, which
// a replica said was never recorded, is recorded after all (stale true);
// nothing to confirm when exists.
func (l *Ledger) confirmAbsent(ctx context.Context, promptID string, exists bool) (stale bool, err error) {
	if exists {
		return false, nil
	}
	_, _, found, err := l.leaderGet(ctx, promptID)
	if err != nil {
		return false, fmt.Errorf("ledger: confirm prompt %s: %w", promptID, err)
	}
	return found, nil
}

// leaderGet reads a prompt's entry from the bucket stream's leader (the
// JetStream API's message get, which only the leader answers — unlike the
// KV's direct gets, which any replica may), or errors while the stream
// has none.
func (l *Ledger) leaderGet(ctx context.Context, promptID string) (Entry, uint64, bool, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": "$KV." + l.promptsBucket + "." + promptKey(promptID)})
	if err != nil {
		return Entry{}, 0, false, err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := l.js.Conn().RequestWithContext(rctx, "$JS.API.STREAM.MSG.GET."+l.promptsStream, req)
	if err != nil {
		return Entry{}, 0, false, fmt.Errorf("ledger: read prompt %s from the leader: %w", promptID, err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq  uint64 `json:"seq"`
			Hdrs []byte `json:"hdrs"`
			Data []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return Entry{}, 0, false, fmt.Errorf("ledger: read prompt %s from the leader: %w", promptID, err)
	}
	switch {
	case resp.Error != nil && resp.Error.Code == 404:
		return Entry{}, 0, false, nil
	case resp.Error != nil:
		return Entry{}, 0, false, fmt.Errorf("ledger: read prompt %s from the leader: %s (code %d)", promptID, resp.Error.Description, resp.Error.ErrCode)
	case resp.Message == nil:
		return Entry{}, 0, false, fmt.Errorf("ledger: read prompt %s from the leader: empty answer", promptID)
	}
	if h, err := nats.DecodeHeadersMsg(resp.Message.Hdrs); err == nil && h.Get("KV-Operation") != "" {
		return Entry{}, 0, false, nil // deleted or purged
	}
	e, err := decodeEntry(resp.Message.Data)
	return e, resp.Message.Seq, err == nil, err
}

// confirm rewrites prev unchanged at rev: stale is true when the bucket
// has moved past rev (the read that produced prev came from a replica
// that was behind).
func (l *Ledger) confirm(ctx context.Context, key string, prev Entry, rev uint64) (stale bool, err error) {
	data, err := messages.Encode(prev)
	if err != nil {
		return false, fmt.Errorf("ledger: encode: %w", err)
	}
	_, err = l.prompts.Update(ctx, key, data, rev)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		return true, nil
	default:
		return false, fmt.Errorf("ledger: confirm prompt %s: %w", prev.PromptID, err)
	}
}

// Entries returns every prompt's entry, sorted by prompt id, as of the
// prompt bucket's stream leader when the call began: every write
// acknowledged before it is in the listing. It reads the bucket in one
// pass (a watcher replays the latest value of every key), not one request
// per prompt.
//
// The watcher's consumer is placed on any replica, and a follower applies
// a write a moment after the leader acknowledged it; a listing replayed
// there can miss the caller's own last writes. The soak's
// two-02-seed3710 ended "requeued 19 in_flight 1" while the durable
// ledger held 20 requeued and none in flight: the run's summary listed
// the ledger right after its end sweep requeued the last prompt, from a
// replica that had not applied that requeue yet. So the stream's last
// sequence is asked of its leader first, and a listing whose newest
// revision is older than that is read again (listLag bounds the wait).
func (l *Ledger) Entries(ctx context.Context) ([]Entry, error) {
	last, err := l.lastSeq(ctx)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(listLag)
	for {
		out, seen, err := l.list(ctx)
		if err != nil {
			return nil, err
		}
		if seen >= last {
			return out, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("ledger: list prompts: the replica that answered stayed behind the stream's leader for %s (revision %d, the leader's %d); try again once the cluster's replicas caught up", listLag, seen, last)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("ledger: list prompts: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// LeaderAnswers asks the prompt bucket's stream for its info and waits
// at most within for the answer: nil once the answer names a leader. A
// read or write sent while the stream elects a leader (its leader's
// server died) is never answered and waits out its whole timeout
// (nats.go's 5 s: v1.55.0 jetstream/jetstream.go defaultAPITimeout); asking first with a short bound, and again until a
// leader answers, starts the work as soon as the election is over. A
// replicated stream's info comes from its leader, except while it has
// none, when each replica answers with its own state and no leader
// (nats-server v2.15.2 server/jetstream_api.go, isGroupLeaderless):
// that answer is not taken.
func (l *Ledger) LeaderAnswers(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	s, err := l.js.Stream(ctx, l.promptsStream)
	if err != nil {
		return fmt.Errorf("ledger: no leader of %s answers yet: %w", l.promptsStream, err)
	}
	if c := s.CachedInfo().Cluster; c != nil && c.Leader == "" {
		return fmt.Errorf("ledger: %s has no leader yet (a replica answered)", l.promptsStream)
	}
	return nil
}

// listLag bounds how long Entries waits for a lagging replica: a
// follower applies within milliseconds of its leader's heartbeat, even on
// a loaded machine; one still behind after this is stuck (catching up
// from a snapshot, cut off), and the caller retries or fails.
var listLag = 10 * time.Second

// lastSeq is the prompt bucket stream's last sequence as its leader
// reports it (a clustered stream's info is answered by its leader).
func (l *Ledger) lastSeq(ctx context.Context) (uint64, error) {
	s, err := l.js.Stream(ctx, l.promptsStream)
	if err != nil {
		return 0, fmt.Errorf("ledger: list prompts: the stream's last sequence: %w", err)
	}
	return s.CachedInfo().State.LastSeq, nil
}

// listOnce replays the latest value of every key once, from whichever
// replica hosts the watcher's consumer, and returns the entries sorted
// by prompt id with the newest revision among them (delete markers
// count: they are messages of the stream too).
func (l *Ledger) listOnce(ctx context.Context) ([]Entry, uint64, error) {
	w, err := l.prompts.WatchAll(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("ledger: list prompts: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []Entry
	var seen uint64
	for {
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("ledger: list prompts: %w", ctx.Err())
		case ent, ok := <-w.Updates():
			if !ok {
				return nil, 0, fmt.Errorf("ledger: list prompts: watcher closed")
			}
			if ent == nil { // the initial values are all delivered
				sort.Slice(out, func(i, j int) bool { return out[i].PromptID < out[j].PromptID })
				return out, seen, nil
			}
			seen = max(seen, ent.Revision())
			if ent.Operation() != jetstream.KeyValuePut {
				continue
			}
			e, err := decodeEntry(ent.Value())
			if err != nil {
				return nil, 0, err
			}
			out = append(out, e)
		}
	}
}

// Progress returns the trainer's stored progress; ok is false before the
// first write.
func (l *Ledger) Progress(ctx context.Context) (p Progress, ok bool, err error) {
	p, _, ok, err = l.readProgress(ctx)
	return p, ok, err
}

func (l *Ledger) readProgress(ctx context.Context) (Progress, uint64, bool, error) {
	ent, err := l.progress.Get(ctx, progressKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Progress{}, 0, false, nil
	}
	if err != nil {
		return Progress{}, 0, false, fmt.Errorf("ledger: read progress: %w", err)
	}
	var p Progress
	if err := json.Unmarshal(ent.Value(), &p); err != nil {
		return Progress{}, 0, false, fmt.Errorf("ledger: decode progress: %w", err)
	}
	return p, ent.Revision(), true, nil
}

// Claim stamps the stored progress with token (a newly won lease's), so
// every holder with an older token is fenced off from now on, and returns
// the progress to resume from. contender.ErrFenced when a newer holder
// already claimed it.
func (l *Ledger) Claim(ctx context.Context, token uint64, holder string) (Progress, error) {
	var out Progress
	err := l.casProgress(ctx, func(prev Progress) (Progress, error) {
		if err := contender.CheckFence(prev.Token, token); err != nil {
			return prev, fmt.Errorf("ledger: claim by %s: %w", holder, err)
		}
		prev.Token, prev.Holder = token, holder
		out = prev
		return prev, nil
	})
	return out, err
}

// SaveProgress stores p, written by the holder of token p.Token. It fails
// with contender.ErrFenced when a newer holder claimed the progress, and with
// ErrStepRegression when step or version would go backwards.
func (l *Ledger) SaveProgress(ctx context.Context, p Progress) error {
	return l.casProgress(ctx, func(prev Progress) (Progress, error) {
		if err := contender.CheckFence(prev.Token, p.Token); err != nil {
			return prev, fmt.Errorf("ledger: progress step %d by %s: %w", p.Step, p.Holder, err)
		}
		if err := NextProgress(prev, p); err != nil {
			return prev, err
		}
		return p, nil
	})
}

// casProgress writes f(stored progress) with compare-and-set, re-reading
// and retrying when another writer got in between (CASRetries times).
func (l *Ledger) casProgress(ctx context.Context, f func(prev Progress) (Progress, error)) error {
	for range l.cfg.CASRetries {
		prev, rev, exists, err := l.readProgress(ctx)
		if err != nil {
			return err
		}
		next, err := f(prev)
		if err != nil {
			return err
		}
		data, err := json.Marshal(next)
		if err != nil {
			return fmt.Errorf("ledger: encode progress: %w", err)
		}
		if exists {
			_, err = l.progress.Update(ctx, progressKey, data, rev)
		} else {
			_, err = l.progress.Create(ctx, progressKey, data)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			continue
		default:
			return fmt.Errorf("ledger: write progress: %w", err)
		}
	}
	return fmt.Errorf("ledger: progress still contended after %d attempts", l.cfg.CASRetries)
}

// RequeueNode requeues every prompt that node consumed and did not settle
// (its in-flight episodes died with it), recording by, and returns them.
// A prompt settled concurrently by someone else (the node was not dead
// after all) is skipped, not an error: the ledger's compare-and-set
// decides who was first.
func (l *Ledger) RequeueNode(ctx context.Context, node, by string) ([]Entry, error) {
	return l.RequeueInFlight(ctx, by, func(e Entry) bool { return e.Sender == node })
}

// RequeueInFlight requeues every prompt in flight (consumed, not settled)
// whose entry match accepts, whoever consumed it, recording by, and
// returns them sorted by prompt id. A new trainer-lease holder uses it
// at its claim to requeue what every older term left in flight: the
// progress names only the last claimer, which may have died before it
// requeued its predecessors' prompts. Settled concurrently: skipped, as
// in RequeueNode.
func (l *Ledger) RequeueInFlight(ctx context.Context, by string, match func(Entry) bool) ([]Entry, error) {
	all, err := l.Entries(ctx)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, e := range all {
		if e.State != messages.LedgerConsumed || !match(e) {
			continue
		}
		ev := e
		ev.State, ev.Sender = messages.LedgerRequeued, by
		got, out1, err := l.Record(ctx, ev)
		switch {
		case errors.Is(err, ErrIllegalTransition):
			continue
		case err != nil:
			return out, err
		case out1 == Applied:
			out = append(out, got)
		}
	}
	return out, nil
}
