package delta

import (
	"context"
	"fmt"

	"github.com/asyncrl/asyncrl/weights/store"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Encode configures the delta codec.
	Encode EncodeConfig
	// FullEvery publishes a full checkpoint as well every this many versions
	// (0: only on demand through PublishFull). Late joiners load the newest
	// full checkpoint instead of replaying a long chain when that is cheaper.
	FullEvery int64
	// Workers bounds parallel uploads of full checkpoints (default 4).
	Workers int
}

// DefaultPublisherConfig: default codec, a full checkpoint every 10 versions.
func DefaultPublisherConfig() PublisherConfig {
	return PublisherConfig{Encode: DefaultEncodeConfig(), FullEvery: 10, Workers: store.DefaultWorkers}
}

// Validate names the first bad field.
func (c PublisherConfig) Validate() error {
	if err := c.Encode.Validate(); err != nil {
		return err
	}
	if c.FullEvery < 0 {
		return fmt.Errorf("delta: PublisherConfig.FullEvery %d: want ≥ 0", c.FullEvery)
	}
	if c.Workers < 1 {
		return fmt.Errorf("delta: PublisherConfig.Workers %d: want ≥ 1", c.Workers)
	}
	return nil
}

// Published reports one publish.
type Published struct {
	Version  int64
	Manifest *Manifest
	// Full is the full checkpoint published with it (nil if none).
	Full *SnapshotManifest
}

// Publisher numbers versions and publishes each as a delta, plus a full
// checkpoint every FullEvery versions. It is not safe for concurrent use;
// versions are published one after another.
type Publisher struct {
	st      store.Store
	cfg     PublisherConfig
	version int64
}

// NewPublisher resumes after the newest committed delta in st (0 when none).
func NewPublisher(ctx context.Context, st store.Store, cfg PublisherConfig) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v, err := Latest(ctx, st)
	if err != nil {
		return nil, err
	}
	return &Publisher{st: st, cfg: cfg, version: v}, nil
}

// Version is the newest published version.
func (p *Publisher) Version() int64 { return p.version }

// Publish publishes next as version+1 against base (the checkpoint of the
// current version). nextDir, when not empty, is next's directory on disk,
// uploaded as a full checkpoint when the version is a multiple of
// FullEvery.
func (p *Publisher) Publish(ctx context.Context, base, next Source, nextDir string) (Published, error) {
	v := p.version + 1
	m, err := Encode(ctx, p.cfg.Encode, base, next, v, p.st)
	if err != nil {
		return Published{}, err
	}
	p.version = v
	out := Published{Version: v, Manifest: m}
	if p.cfg.FullEvery > 0 && v%p.cfg.FullEvery == 0 && nextDir != "" {
		if out.Full, err = p.PublishFull(ctx, nextDir); err != nil {
			return out, fmt.Errorf("delta: version %d is published as a delta, but its full checkpoint failed: %w", v, err)
		}
	}
	return out, nil
}

// PublishFull publishes dir as the full checkpoint of the current version
// (on demand).
func (p *Publisher) PublishFull(ctx context.Context, dir string) (*SnapshotManifest, error) {
	return PublishSnapshot(ctx, p.st, KindFull, p.version, dir, p.cfg.Workers)
}

// PublishLoRA publishes a LoRA adapter directory as the next LoRA version
// (lora-{v:08d}/, numbered on its own, starting at 1): adapters replace
// each other whole, so there is no delta and no base.
func (p *Publisher) PublishLoRA(ctx context.Context, dir string) (*SnapshotManifest, error) {
	vs, err := SnapshotVersions(ctx, p.st, KindLoRA)
	if err != nil {
		return nil, err
	}
	next := int64(1)
	if len(vs) > 0 {
		next = vs[len(vs)-1] + 1
	}
	return PublishSnapshot(ctx, p.st, KindLoRA, next, dir, p.cfg.Workers)
}
