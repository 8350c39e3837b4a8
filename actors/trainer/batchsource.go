package trainer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors"
	"github.com/asyncrl/asyncrl/actors/trainer/assemble"
	"github.com/asyncrl/asyncrl/actors/trainer/fetchrule"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// BatchSource fetches the token batch a TrainBatch's group reference
// names (issue 31: trajectories stay in the trajectory buffer; control
// messages carry references). It returns the batch's Arrow bytes, checked
// against the reference (size, checksum, group).
type BatchSource interface {
	Fetch(ctx context.Context, group string, ref messages.BatchRef) ([]byte, error)
}

// ErrBatchMissing is wrapped by a fetch whose referenced message is gone
// (deleted, trimmed by the buffer's limits, or the buffer is another
// term's): the step fails; it never trains a partial batch.
var ErrBatchMissing = errors.New("trainer: referenced group batch missing")

// StreamSource fetches stored references from the trajectory buffer by
// sequence (a stream message get, answered by the stream's leader: see
// transport/natsbus GetMsg) and serves inline ones as they are. Stream is
// the buffer as the pipeline opened it (both buses' streams are
// transport.StoredReader). The in-process memhub stream is one too, so
// the simulator-free unit tests and the default run use one code path.
type StreamSource struct {
	Stream transport.StoredReader
	// Bind, used while Stream is nil, binds the buffer before a try (a
	// remote trainer worker binds the pipeline holder's buffer at its
	// first stored reference: the holder may make it after the worker
	// started). A bind the buffer fails transiently (JetStream's 503 at
	// step 1) is tried again on the same schedule and within the same
	// RetryFor as a read; Bind keeps what it bound for later fetches.
	Bind func(ctx context.Context) (transport.StoredReader, error)
	// Name is the stream's name, for errors (RunPlan.GroupStream).
	Name string
	// RetryFor bounds how long a fetch the buffer failed transiently
	// (transport.Transient: a timeout, no responders, the stream's
	// "temporarily unavailable" while its replicas elect a leader) is
	// tried again before the step fails: 0 is DefaultFetchRetryFor, < 0
	// tries once (fetchrule.Rule). A cluster's term watch steps the term
	// down when its buffer stays unhealthy for as long (termwatch
	// UnhealthyAfter, 30 s), which cancels the fetch.
	RetryFor time.Duration
	// OnRetry, when set, is told of each failed try that will be tried
	// again (for the log), before the wait.
	OnRetry func(group string, try int, err error)
}

// LogFetchRetries is an OnRetry that warns on l, naming the group, the
// try and the cause — at most once per fetchLogEvery (a 30 s outage is
// about 17 tries per group); a line after suppressed ones counts them.
// Make one per trainer and keep it: the limit lives in what it returns.
func LogFetchRetries(l zerolog.Logger) func(group string, try int, err error) {
	limited := actors.NewLimitedLogger(l, actors.RealClock{}, fetchLogEvery)
	return func(group string, try int, err error) {
		limited.Warn("fetch-retry").Err(err).Str("group", group).Int("try", try).
			Msg("trainer: trajectory buffer could not be read for now; fetching again (logged at most once per 10s)")
	}
}

// fetchLogEvery is the least time between two logged fetch retries, as
// the rollout's store retries (actors/rollout storeLogEvery).
const fetchLogEvery = 10 * time.Second

// DefaultFetchRetryFor is StreamSource.RetryFor's default
// (fetchrule.DefaultRetryFor): longer than a JetStream stream's leader
// election after a server died (4–9 s), as long as a cluster's term
// watch waits on an unhealthy buffer.
const DefaultFetchRetryFor = fetchrule.DefaultRetryFor

var _ BatchSource = StreamSource{}

// Fetch implements BatchSource.
func (s StreamSource) Fetch(ctx context.Context, group string, ref messages.BatchRef) ([]byte, error) {
	if !ref.Stored() {
		return ref.Resolve(group, nil)
	}
	if s.Stream == nil && s.Bind == nil {
		return nil, fmt.Errorf("trainer: group %s is stored at %s seq %d but the trainer has no trajectory buffer to fetch from (set trainer.Config.Batches)", group, ref.Subject, ref.Seq)
	}
	m, err := s.get(ctx, group, ref.Seq)
	if errors.Is(err, transport.ErrNoMessage) {
		return nil, fmt.Errorf("%w: group %s: stream %s seq %d (subject %s) is gone — deleted after it was settled, or trimmed by the buffer's max age; the step is not trained: %w",
			ErrBatchMissing, group, s.Name, ref.Seq, ref.Subject, err)
	}
	if err != nil {
		return nil, fmt.Errorf("trainer: fetch group %s from stream %s seq %d: %w", group, s.Name, ref.Seq, err)
	}
	if m.Subject != ref.Subject {
		return nil, fmt.Errorf("trainer: group %s: stream %s seq %d is on %s, the reference says %s: %w", group, s.Name, ref.Seq, m.Subject, ref.Subject, messages.ErrBadBatch)
	}
	return ref.Resolve(group, m.Data)
}

// get reads seq (binding the buffer first when it has only Bind), trying
// again while the buffer fails transiently, as the fetch rule says, until
// it gives up or ctx ends. Before issue 31 the batch rode inside
// the TrainBatch; since the trainer fetches it, a buffer that cannot
// answer for a few seconds (a leader election, a cluster just started)
// must not fail the step — that cost a whole term (make test-cluster,
// 2026-12-07: "JetStream system temporarily unavailable" at step 1).
func (s StreamSource) get(ctx context.Context, group string, seq uint64) (transport.StoredMsg, error) {
	rule := fetchrule.Rule{RetryFor: s.RetryFor}
	began := time.Now()
	reader := s.Stream
	for try := 1; ; try++ {
		var m transport.StoredMsg
		var err error
		if reader == nil {
			reader, err = s.Bind(ctx)
		}
		if err == nil {
			m, err = reader.GetMsg(ctx, seq)
		}
		if err == nil || !transport.Transient(err) {
			return m, err
		}
		if ctx.Err() != nil {
			return m, errors.Join(err, context.Cause(ctx))
		}
		d := rule.After(try, time.Since(began))
		if d.GiveUp {
			return m, fmt.Errorf("%w (%v)", err, d)
		}
		if s.OnRetry != nil {
			s.OnRetry(group, try, err)
		}
		t := time.NewTimer(d.Wait)
		select {
		case <-ctx.Done():
			// The context's cause goes with the try's error, so a
			// trainer stopping reads as a stop (errors.Is
			// context.Canceled), not as a buffer failure.
			t.Stop()
			return m, errors.Join(err, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// inlineOnly is the source of a trainer without Config.Batches: inline
// references only.
type inlineOnly struct{}

func (inlineOnly) Fetch(ctx context.Context, group string, ref messages.BatchRef) ([]byte, error) {
	return StreamSource{}.Fetch(ctx, group, ref)
}

// fetchBatch fetches every group of tb and assembles the mini-batch.
func fetchBatch(ctx context.Context, src BatchSource, tb messages.TrainBatch) (*messages.TokenBatch, assemble.Stats, error) {
	data := make([][]byte, len(tb.Groups))
	for i, g := range tb.Groups {
		p, err := src.Fetch(ctx, g.GroupID, g.Batch)
		if err != nil {
			return nil, assemble.Stats{}, err
		}
		data[i] = p
	}
	return assemble.Batch(tb, data)
}
