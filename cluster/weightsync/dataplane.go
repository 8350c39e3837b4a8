package weightsync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/asyncrl/asyncrl/actors/publisher/tracker"
	"github.com/asyncrl/asyncrl/messages"
	pol "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport/dataplane"
	"github.com/asyncrl/asyncrl/transport/dataplane/tcp"
)

// dataPlane is publisher.transport dataplane: each version's serving
// checkpoint (model.safetensors, full) is held in memory and offered on the
// TCP data plane under a TransferPlan whose ranges carry xxh3 checksums;
// every engine's agent pulls it, verifies every range, and loads it from
// memory. No store is written, so there is nothing to replay: an agent
// always fetches the newest version it was told to load.
type dataPlane struct {
	be    *tcp.Backend
	runID string
	cfg   pol.Config // the model's shape; config.json is not in the bytes
	names []string   // the engines: the plans' destinations
	// corrupt, when set (tests), changes a version's bytes after its
	// checksums were computed, as a bad link or a bad source would.
	corrupt func(version int64, b []byte)

	bytes, refused prometheus.Counter

	mu      sync.Mutex
	version int64 // newest version offered
	offers  map[int64]*dpVersion
}

// dpVersion is one offered version.
type dpVersion struct {
	plan  messages.TransferPlan
	size  int64
	offer dataplane.Offer
}

// dpKeep is how many versions stay offered: the newest, and the one before
// it for an agent still pulling it when the next arrived (it then fails and
// is sent the newer one).
const dpKeep = 2

// dpRangeBytes is the size of one checksummed range.
const dpRangeBytes = 1 << 20

// DataPlane is the data plane mode of a Sync (publisher.transport
// dataplane) for the engines names of run runID, whose model has shape
// cfg. corrupt, when set (tests), changes a version's bytes after its
// checksums were computed, as a bad link or a bad source would.
func DataPlane(runID string, cfg pol.Config, names []string, corrupt func(version int64, b []byte)) (Mode, error) {
	return newDataPlane(runID, cfg, names, corrupt)
}

func newDataPlane(runID string, cfg pol.Config, names []string, corrupt func(version int64, b []byte)) (*dataPlane, error) {
	be, err := tcp.New(tcp.DefaultConfig()) // binds 127.0.0.1
	if err != nil {
		return nil, fmt.Errorf("node: data plane: %w", err)
	}
	return &dataPlane{be: be, runID: runID, cfg: cfg, names: names, corrupt: corrupt, offers: map[int64]*dpVersion{},
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_publisher_dataplane_bytes_total",
			Help: "Bytes of the serving checkpoints offered on the data plane (once per version)."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "asyncrl_publisher_dataplane_refused_total",
			Help: "Engine fetches of a version refused (checksum mismatch, incomplete, withdrawn); the version was not loaded."}),
	}, nil
}

// publishDir offers dir's model.safetensors as version.
func (d *dataPlane) publishDir(ctx context.Context, dir string, version int64) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return 0, fmt.Errorf("node: data plane: %w (a single-file serving checkpoint is needed)", err)
	}
	return d.publish(ctx, b, version)
}

func (d *dataPlane) publish(ctx context.Context, b []byte, version int64) (int64, error) {
	size := int64(len(b))
	ranges := dataplane.SplitRanges("model.safetensors", size, dpRangeBytes)
	if err := dataplane.Checksum(dataplane.Buffer(b), ranges, dataplane.XXH3); err != nil {
		return 0, fmt.Errorf("node: data plane: %w", err)
	}
	if d.corrupt != nil {
		d.corrupt(version, b)
	}
	p := messages.TransferPlan{Header: messages.Header{RunID: d.runID, Sender: "publisher-0", Version: version},
		TransferID: fmt.Sprintf("weights-%s-v%d", d.runID, version), Source: "publisher-0",
		Destinations: append([]string(nil), d.names...), Ranges: ranges}
	off, err := d.be.Publish(ctx, &p, dataplane.Buffer(b))
	if err != nil {
		return 0, fmt.Errorf("node: data plane: %w", err)
	}
	p.URI = off.URI()
	d.mu.Lock()
	d.offers[version] = &dpVersion{plan: p, size: size, offer: off}
	d.version = max(d.version, version)
	var old []dataplane.Offer
	for v, o := range d.offers {
		if v <= d.version-dpKeep {
			old = append(old, o.offer)
			delete(d.offers, v)
		}
	}
	d.mu.Unlock()
	for _, o := range old {
		_ = o.Close()
	}
	d.bytes.Add(float64(size))
	return size, nil
}

// current is the newest version offered.
func (d *dataPlane) current() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.version
}

// fetch pulls version into memory, verifying every range, and loads the
// model from the bytes. An error (a bad checksum above all) means the
// version must not be served.
func (d *dataPlane) fetch(ctx context.Context, version int64) (*pol.Model, error) {
	d.mu.Lock()
	o := d.offers[version]
	d.mu.Unlock()
	if o == nil {
		d.refused.Inc()
		return nil, fmt.Errorf("node: data plane: version %d: %w", version, dataplane.ErrUnknownTransfer)
	}
	buf := make(dataplane.Buffer, o.size)
	if _, err := d.be.Fetch(ctx, &o.plan, buf); err != nil {
		d.refused.Inc()
		return nil, fmt.Errorf("node: data plane: version %d: %w", version, err)
	}
	return pol.LoadServingFrom(d.cfg, buf, o.size)
}

// close withdraws every offer and stops the server.
func (d *dataPlane) close() {
	d.mu.Lock()
	offers := d.offers
	d.offers = map[int64]*dpVersion{}
	d.mu.Unlock()
	for _, o := range offers {
		_ = o.offer.Close()
	}
	_ = d.be.Close()
}

func (d *dataPlane) collectors() []prometheus.Collector {
	return []prometheus.Collector{d.bytes, d.refused}
}

// publishVersion offers dir's checkpoint on the data plane and announces
// the version to the shell, which dispatches it to the agents; the bytes
// are in memory from then on, so an owned dir is deleted at once.
func (d *dataPlane) publishVersion(ctx context.Context, w *Sync, dir string, version int64, owned bool, t0 time.Time) error {
	size, err := d.publishDir(ctx, dir, version)
	if owned {
		_ = os.RemoveAll(dir)
	}
	if err != nil {
		return fmt.Errorf("node: publisher: version %d: %w", version, err)
	}
	w.observePublish(time.Since(t0))
	return w.publishInfo(ctx, tracker.VersionInfo{Version: version, FullBytes: size})
}

// source is engine d's Source: the data plane serves only engines this
// process started.
func (d *dataPlane) source(_ *Sync, e *Driven) (Source, error) {
	if e.Local == nil {
		return nil, fmt.Errorf("node: data plane: %s is not an engine of this node", e.Name)
	}
	return dataPlaneSource{d}, nil
}

// dataPlaneSource pulls target's bytes from the publisher's data plane
// into memory (every range checksum-verified; a mismatch fails the
// version, which is then not served), builds the model while the engine
// still serves, then pauses, swaps it in and resumes. The swap is in
// process: the data plane serves only engines the node started.
type dataPlaneSource struct{ d *dataPlane }

func (s dataPlaneSource) load(ctx context.Context, a *Agent, target int64) (int64, error) {
	m, err := s.d.fetch(ctx, target)
	if err != nil {
		return 0, err
	}
	a.beforeApply(target)
	le := a.c.Engine.Local
	if err := le.E.Pause(ctx, a.c.PauseMode, false); err != nil {
		// A "wait" pause cut short (ctx ended) leaves the engine paused:
		// let it serve its current weights rather than nothing.
		le.E.Resume()
		return 0, a.c.Engine.gone(err)
	}
	err = le.E.SetModel(m, target)
	le.E.Resume()
	if err != nil {
		return 0, a.c.Engine.gone(err)
	}
	return target, nil
}
