package tracker

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// NoVersion marks an engine that holds no weights yet.
const NoVersion int64 = -1

// Sentinel errors.
var (
	ErrUnknownEngine  = errors.New("publisher: unknown engine")
	ErrUnknownVersion = errors.New("publisher: version not published")
	ErrVersionOrder   = errors.New("publisher: versions must be published in order")
)

// Config configures a Tracker.
type Config struct {
	// MaxLag is how many versions behind the target an engine may serve and
	// still receive traffic (default 0: only the newest version).
	MaxLag int64
	// BaseBytes is the size of the base checkpoint (version 0), used to
	// cost a catch-up from scratch.
	BaseBytes int64
}

// DefaultConfig returns MaxLag 0.
func DefaultConfig() Config { return Config{} }

// Validate names the first bad field.
func (c Config) Validate() error {
	if c.MaxLag < 0 {
		return fmt.Errorf("publisher: Config.MaxLag %d: want ≥ 0", c.MaxLag)
	}
	if c.BaseBytes < 0 {
		return fmt.Errorf("publisher: Config.BaseBytes %d: want ≥ 0", c.BaseBytes)
	}
	return nil
}

// VersionInfo describes a published version.
type VersionInfo struct {
	// Version number (target+1 for a new publish).
	Version int64
	// DeltaBytes is the compressed size of its delta (0 for an unchanged
	// publish).
	DeltaBytes int64
	// FullBytes is the size of its full checkpoint, or 0 if none exists.
	FullBytes int64
	// NoDelta: no delta leads to this version from the one before (Tinker's
	// sampler checkpoints are whole checkpoints), so a plan reaches it or
	// a later version only by loading a full checkpoint at or above it.
	// Such a version must have a full checkpoint (FullBytes > 0).
	NoDelta bool
}

// Plan is how an engine gets from From to Target.
type Plan struct {
	// From is the version the engine serves (NoVersion for none).
	From int64
	// Target is the version it must reach.
	Target int64
	// Full is the full checkpoint to load first, or NoVersion.
	Full int64
	// Deltas are the delta versions to replay, in order, after Full (or
	// after From when Full is NoVersion).
	Deltas []int64
	// Bytes the plan moves.
	Bytes int64
}

// UpToDate reports whether nothing is to be done.
func (p Plan) UpToDate() bool { return p.Full == NoVersion && len(p.Deltas) == 0 }

// String is a deterministic one-line form for logs and golden files.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan from=%d target=%d", p.From, p.Target)
	if p.Full != NoVersion {
		fmt.Fprintf(&b, " full=%d", p.Full)
	}
	if len(p.Deltas) > 0 {
		ds := make([]string, len(p.Deltas))
		for i, d := range p.Deltas {
			ds[i] = strconv.FormatInt(d, 10)
		}
		fmt.Fprintf(&b, " deltas=%s", strings.Join(ds, ","))
	}
	fmt.Fprintf(&b, " bytes=%d", p.Bytes)
	return b.String()
}

// Command tells one engine to fetch and load a plan.
type Command struct {
	Engine string
	Plan   Plan
}

// EngineStatus is one engine's view in the tracker.
type EngineStatus struct {
	Engine   string
	Serving  int64
	Fetching int64 // NoVersion when not fetching
	Routable bool
}

type engine struct {
	serving, fetching int64
	failed            int64 // highest version it failed to reach, NoVersion for none
}

// Tracker is the version tracker core.
type Tracker struct {
	cfg         Config
	versions    []VersionInfo // versions[v] for v = 0..target
	engines     map[string]*engine
	minRoutable int64
	ignoredAcks int64
	routerMin   int64   // the router's minimum: MinRoutable once some engine serves it
	awaiting    []int64 // versions whose publish settles in Ready, ascending
	ready       Ready
}

// New returns a tracker whose target is version 0 (the base).
func New(cfg Config) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Tracker{
		cfg:      cfg,
		versions: []VersionInfo{{Version: 0, FullBytes: max(cfg.BaseBytes, 1)}},
		engines:  map[string]*engine{},
		ready:    Ready{MinVersion: NoVersion},
	}, nil
}

// Target is the newest published version.
func (t *Tracker) Target() int64 { return int64(len(t.versions)) - 1 }

// MinRoutable is the lowest version the router may send traffic to.
func (t *Tracker) MinRoutable() int64 { return t.minRoutable }

// IgnoredAcks counts acks at or below an engine's served version.
func (t *Tracker) IgnoredAcks() int64 { return t.ignoredAcks }

// Publish records a new version (target+1) and returns a command for every
// engine behind it, sorted by engine. MinRoutable rises with it.
func (t *Tracker) Publish(info VersionInfo) ([]Command, error) {
	if info.Version != t.Target()+1 {
		return nil, fmt.Errorf("%w: got %d after %d", ErrVersionOrder, info.Version, t.Target())
	}
	if info.DeltaBytes < 0 || info.FullBytes < 0 {
		return nil, fmt.Errorf("publisher: version %d: negative size", info.Version)
	}
	if info.NoDelta && info.FullBytes == 0 {
		return nil, fmt.Errorf("publisher: version %d: no delta and no full checkpoint: nothing could load it", info.Version)
	}
	t.versions = append(t.versions, info)
	t.minRoutable = max(0, t.Target()-t.cfg.MaxLag)
	var cmds []Command
	for _, name := range t.engineNames() {
		if p := t.plan(t.engines[name].serving); !p.UpToDate() {
			cmds = append(cmds, Command{Engine: name, Plan: p})
		}
	}
	t.decide()
	t.check()
	return cmds, nil
}

// AddFull records that a full checkpoint of an already published version
// exists (on-demand full checkpoints).
func (t *Tracker) AddFull(version, bytes int64) error {
	if version < 0 || version > t.Target() {
		return fmt.Errorf("%w: %d", ErrUnknownVersion, version)
	}
	if bytes <= 0 {
		return fmt.Errorf("publisher: full checkpoint of version %d: size %d must be > 0", version, bytes)
	}
	t.versions[version].FullBytes = bytes
	return nil
}

// Join registers an engine serving version (NoVersion for none) and
// returns how it catches up. Joining again re-registers (an engine that
// restarted may have lost its weights).
func (t *Tracker) Join(name string, serving int64) (Command, error) {
	if name == "" {
		return Command{}, fmt.Errorf("%w: empty name", ErrUnknownEngine)
	}
	if serving < NoVersion || serving > t.Target() {
		return Command{}, fmt.Errorf("%w: engine %s joins serving %d, target is %d", ErrUnknownVersion, name, serving, t.Target())
	}
	t.engines[name] = &engine{serving: serving, fetching: NoVersion, failed: NoVersion}
	t.decide()
	t.check()
	return Command{Engine: name, Plan: t.plan(serving)}, nil
}

// Leave forgets an engine (an awaited version it alone could still
// reach settles NoEngine).
func (t *Tracker) Leave(name string) {
	delete(t.engines, name)
	t.decide()
}

// Fetching records that an engine started fetching version.
func (t *Tracker) Fetching(name string, version int64) error {
	e, ok := t.engines[name]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownEngine, name)
	}
	if version < 0 || version > t.Target() {
		return fmt.Errorf("%w: engine %s fetching %d, target is %d", ErrUnknownVersion, name, version, t.Target())
	}
	if version > e.serving {
		e.fetching = version
	}
	return nil
}

// Ack records that an engine serves version. It returns false (and counts
// it) for an ack at or below the served version: versions per engine only
// increase.
func (t *Tracker) Ack(name string, version int64) (bool, error) {
	e, ok := t.engines[name]
	if !ok {
		return false, fmt.Errorf("%w: %s", ErrUnknownEngine, name)
	}
	if version < 0 || version > t.Target() {
		return false, fmt.Errorf("%w: engine %s acks %d, target is %d", ErrUnknownVersion, name, version, t.Target())
	}
	if version <= e.serving {
		t.ignoredAcks++
		return false, nil
	}
	e.serving = version
	if e.fetching <= version {
		e.fetching = NoVersion
	}
	t.decide()
	t.check()
	return true, nil
}

// Routable reports whether the router may send traffic to an engine.
func (t *Tracker) Routable(name string) bool {
	e, ok := t.engines[name]
	return ok && e.serving >= t.minRoutable
}

// RoutableEngines lists the routable engines, sorted.
func (t *Tracker) RoutableEngines() []string {
	var out []string
	for _, n := range t.engineNames() {
		if t.Routable(n) {
			out = append(out, n)
		}
	}
	return out
}

// Engines returns every engine's status, sorted by name.
func (t *Tracker) Engines() []EngineStatus {
	var out []EngineStatus
	for _, n := range t.engineNames() {
		e := t.engines[n]
		out = append(out, EngineStatus{Engine: n, Serving: e.serving, Fetching: e.fetching, Routable: t.Routable(n)})
	}
	return out
}

// Plan returns how an engine catches up to the target.
func (t *Tracker) Plan(name string) (Plan, error) {
	e, ok := t.engines[name]
	if !ok {
		return Plan{}, fmt.Errorf("%w: %s", ErrUnknownEngine, name)
	}
	return t.plan(e.serving), nil
}

// plan picks the cheapest way from `from` to the target: replaying every
// delta, or loading a full checkpoint above `from` (any, from scratch) and
// replaying the deltas after it. The newest full checkpoint is not always
// the cheapest (sizes vary), so each is tried. One pass down from the
// target keeps the cost of the deltas above v as a running sum, so a plan
// costs O(target − from), not a re-summed tail per candidate; ties go to
// plain deltas, then to the newest full checkpoint. A NoDelta version
// ends the pass: nothing below it can be replayed past it (Publish made
// sure it has a full checkpoint, so a plan exists).
func (t *Tracker) plan(from int64) Plan {
	target := t.Target()
	p := Plan{From: from, Target: target, Full: NoVersion}
	if from >= target {
		return p
	}
	best, bestFull := int64(-1), NoVersion
	var tail int64 // DeltaBytes of v+1..target
	deltas := true // every delta from `from` to the target exists
	for v := target; v > from && v >= 0; v-- {
		if fb := t.versions[v].FullBytes; fb > 0 && (best < 0 || fb+tail < best) {
			best, bestFull = fb+tail, v
		}
		if t.versions[v].NoDelta {
			deltas = false
			break
		}
		tail += t.versions[v].DeltaBytes
	}
	if deltas && from != NoVersion && (best < 0 || tail <= best) {
		best, bestFull = tail, NoVersion
	}
	p.Bytes, p.Full = best, bestFull
	start := from
	if bestFull != NoVersion {
		start = bestFull
	}
	for v := start + 1; v <= target; v++ {
		p.Deltas = append(p.Deltas, v)
	}
	return p
}

func (t *Tracker) engineNames() []string {
	names := make([]string, 0, len(t.engines))
	for n := range t.engines {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// check panics on a broken invariant.
func (t *Tracker) check() {
	if t.minRoutable < 0 || t.minRoutable > t.Target() {
		panic(fmt.Sprintf("publisher: min routable %d outside [0, %d]", t.minRoutable, t.Target()))
	}
	if t.routerMin < 0 || t.routerMin > t.minRoutable {
		panic(fmt.Sprintf("publisher: router min %d outside [0, min routable %d]", t.routerMin, t.minRoutable))
	}
	for n, e := range t.engines {
		if e.serving > t.Target() || e.serving < NoVersion {
			panic(fmt.Sprintf("publisher: engine %s serves %d, target %d", n, e.serving, t.Target()))
		}
		if e.fetching != NoVersion && e.fetching <= e.serving {
			panic(fmt.Sprintf("publisher: engine %s fetching %d at or below served %d", n, e.fetching, e.serving))
		}
	}
}
