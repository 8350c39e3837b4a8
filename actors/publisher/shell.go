package publisher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport"
)

// ErrNoEngine: a published version reached no engine (every one that was
// told to load it failed or left).
var ErrNoEngine = errors.New("publisher: no engine serves the published version")

// Router is what the shell tells the request router. Both calls must be
// cheap and must not call back into the shell; an error (e.g. the router
// does not know the engine's URL) is logged with the engine's URL.
type Router interface {
	// SetVersion records the version an engine (by URL) acknowledged.
	SetVersion(url string, version int64) error
	// SetMinVersion sets the lowest version the router may route to.
	SetMinVersion(version int64) error
}

// Dispatcher hands a command to an engine's receiver. It must not block:
// the receiver works on its own and reports with an ack (or Failed).
type Dispatcher interface {
	Dispatch(cmd tracker.Command)
}

// Config configures a Shell.
type Config struct {
	// Tracker configures the version tracker core.
	Tracker tracker.Config
	// RunID filters acks: acks of other runs are ignored.
	RunID string
	// Acks is the subject (pattern) of EngineVersionAck messages; empty
	// means acks come only through Ack.
	Acks string
	// MinVersion is the subject a MinVersionSet is published on each time
	// the router's minimum rises, for observers and routers in other
	// processes; empty publishes nothing.
	MinVersion string
	// Sender names the shell in the messages it publishes.
	Sender string
	// Logger receives ack and failure notices (default zerolog.Nop()).
	Logger zerolog.Logger
}

// Shell is the publisher actor shell: it serialises calls into the
// tracker and carries out its Ready (the router's minimum, the settled
// publishes). The decisions are the tracker's; the shell keeps only what
// it needs to carry them out (URLs, the outcomes not yet collected).
type Shell struct {
	cfg    Config
	bus    transport.Bus
	router Router
	disp   Dispatcher
	sub    transport.Subscription

	mu       sync.Mutex
	tr       *tracker.Tracker
	urls     map[string]string
	outcomes map[int64]tracker.Outcome // settled publishes their Publish has not collected
	changed  chan struct{}             // closed and replaced when an outcome arrives
}

// New starts a shell; with Config.Acks set it subscribes to acks on bus.
func New(cfg Config, bus transport.Bus, r Router, d Dispatcher) (*Shell, error) {
	tr, err := tracker.New(cfg.Tracker)
	if err != nil {
		return nil, err
	}
	if r == nil || d == nil {
		return nil, errors.New("publisher: Router and Dispatcher are required")
	}
	if (cfg.Acks != "" || cfg.MinVersion != "") && bus == nil {
		return nil, errors.New("publisher: Config.Acks and Config.MinVersion need a bus")
	}
	s := &Shell{cfg: cfg, bus: bus, router: r, disp: d, tr: tr, urls: map[string]string{},
		outcomes: map[int64]tracker.Outcome{}, changed: make(chan struct{})}
	if cfg.Acks != "" {
		if s.sub, err = bus.Subscribe(cfg.Acks, s.onAck); err != nil {
			return nil, fmt.Errorf("publisher: subscribe %s: %w", cfg.Acks, err)
		}
	}
	return s, nil
}

// Close stops listening for acks.
func (s *Shell) Close() error {
	if s.sub == nil {
		return nil
	}
	return s.sub.Unsubscribe()
}

func (s *Shell) onAck(msg *transport.Msg) {
	a, err := messages.DecodeAs[messages.EngineVersionAck](msg.Data)
	if err != nil || a.RunID != s.cfg.RunID {
		return
	}
	if _, err := s.Ack(a.Engine, a.Version); err != nil {
		s.cfg.Logger.Warn().Err(err).Str("engine", a.Engine).Int64("version", a.Version).Msg("publisher: ack refused")
	}
}

// applyLocked carries out the tracker's Ready: the router's new minimum
// (returned, to be announced outside the lock) and the settled publishes
// (handed to their waiting Publish).
func (s *Shell) applyLocked() (minVersion int64) {
	rd := s.tr.Ready()
	s.tr.Advance()
	if rd.MinVersion != tracker.NoVersion {
		if err := s.router.SetMinVersion(rd.MinVersion); err != nil {
			s.cfg.Logger.Warn().Err(err).Int64("min_version", rd.MinVersion).Msg("publisher: router refused the minimum version")
		}
	}
	for _, st := range rd.Settled {
		s.outcomes[st.Version] = st.Outcome
	}
	if len(rd.Settled) > 0 {
		close(s.changed)
		s.changed = make(chan struct{})
	}
	return rd.MinVersion
}

// unlockAndAnnounce releases the lock taken around a tracker call, after
// carrying out its Ready, and announces a risen minimum (bus I/O, outside
// the lock).
func (s *Shell) unlockAndAnnounce() {
	m := s.applyLocked()
	s.mu.Unlock()
	if m != tracker.NoVersion && s.cfg.MinVersion != "" {
		s.announceMin(m)
	}
}

// Join registers an engine serving version and tells the router.
func (s *Shell) Join(name, url string, serving int64) (tracker.Command, error) {
	s.mu.Lock()
	defer s.unlockAndAnnounce()
	cmd, err := s.tr.Join(name, serving)
	if err != nil {
		return cmd, err
	}
	s.urls[name] = url
	if serving != tracker.NoVersion {
		s.setRouterVersion(name, url, serving)
	}
	return cmd, nil
}

// Leave forgets an engine (stopped or removed).
func (s *Shell) Leave(name string) {
	s.mu.Lock()
	defer s.unlockAndAnnounce()
	s.tr.Leave(name)
	delete(s.urls, name)
}

// Fetching records that an engine's receiver started on version.
func (s *Shell) Fetching(name string, version int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tr.Fetching(name, version)
}

// Failed records that an engine could not reach version. An engine the
// tracker does not know (it left meanwhile) is ignored.
func (s *Shell) Failed(name string, version int64, err error) {
	s.mu.Lock()
	defer s.unlockAndAnnounce()
	if ferr := s.tr.Failed(name, version); ferr != nil {
		if !errors.Is(ferr, tracker.ErrUnknownEngine) {
			s.cfg.Logger.Warn().Err(ferr).Str("engine", name).Int64("version", version).Msg("publisher: failure refused")
		}
		return
	}
	s.cfg.Logger.Warn().Err(err).Str("engine", name).Int64("version", version).Msg("publisher: engine did not load the version")
}

// Ack records that an engine serves version; it reports whether the ack
// was new (a late or duplicate ack is ignored and counted by the tracker).
func (s *Shell) Ack(name string, version int64) (bool, error) {
	s.mu.Lock()
	defer s.unlockAndAnnounce()
	ok, err := s.tr.Ack(name, version)
	if err != nil || !ok {
		return ok, err
	}
	s.setRouterVersion(name, s.urls[name], version)
	return true, nil
}

// setRouterVersion tells the router that engine name (at url) serves
// version, logging a refusal (an engine the router does not know).
func (s *Shell) setRouterVersion(name, url string, version int64) {
	if err := s.router.SetVersion(url, version); err != nil {
		s.cfg.Logger.Warn().Err(err).Str("engine", name).Str("url", url).Int64("version", version).Msg("publisher: router refused the engine's version")
	}
}

// announceMin publishes the router's minimum m (outside the lock: bus
// I/O). Two announcements may pass each other; observers keep the larger.
func (s *Shell) announceMin(m int64) {
	data, err := messages.Encode(messages.MinVersionSet{Header: messages.Header{RunID: s.cfg.RunID, Sender: s.cfg.Sender, Version: m}, MinVersion: m})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = s.bus.Publish(ctx, s.cfg.MinVersion, data)
		cancel()
	}
	if err != nil {
		s.cfg.Logger.Warn().Err(err).Int64("min_version", m).Msg("publisher: MinVersionSet not sent")
	}
}

// Publish records info (the next version; the newest version again is a
// retry of a publish that failed), dispatches the catch-up commands and
// waits until the tracker settles the version: routable on some engine
// (nil), or out of every engine's reach (ErrNoEngine), or ctx ends.
//
// A retry dispatches the version again to every engine that failed it
// (tracker.PublishAwait), so an engine that was briefly unreachable gets
// it; it waits for those, for an engine still on its way and for one
// that joined since (its Join's command brings it), and settles NoEngine
// at once only when no engine is left. Calls for one version must not
// overlap — its outcome goes to one waiter, and a call drops the outcome
// an earlier, abandoned call left — which the Publisher contract gives:
// the trainer publishes one version at a time (its step rule retries a
// failed publish a bounded number of times, actors/trainer/steprule).
func (s *Shell) Publish(ctx context.Context, info tracker.VersionInfo) error {
	s.mu.Lock()
	delete(s.outcomes, info.Version) // an earlier try's, its Publish gone (ctx ended)
	cmds, err := s.tr.PublishAwait(info)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	for _, c := range cmds {
		s.disp.Dispatch(c)
	}
	s.unlockAndAnnounce()
	for {
		s.mu.Lock()
		out, done := s.outcomes[info.Version]
		delete(s.outcomes, info.Version)
		ch := s.changed
		s.mu.Unlock()
		switch {
		case done && out == tracker.NoEngine:
			return fmt.Errorf("%w: version %d", ErrNoEngine, info.Version)
		case done:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("publisher: waiting for version %d: %w", info.Version, ctx.Err())
		case <-ch:
		}
	}
}

// MinRoutable is the tracker's minimum routable version.
func (s *Shell) MinRoutable() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tr.MinRoutable()
}

// RouterMin is the minimum version the router was last given.
func (s *Shell) RouterMin() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tr.RouterMin()
}

// Engines returns every engine's status in the tracker.
func (s *Shell) Engines() []tracker.EngineStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tr.Engines()
}

// IgnoredAcks counts late or duplicate acks.
func (s *Shell) IgnoredAcks() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tr.IgnoredAcks()
}
