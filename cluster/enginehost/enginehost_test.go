package enginehost

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/asyncrl/asyncrl/cluster/internal/clustertest"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/internal/syncbuf"
	"github.com/asyncrl/asyncrl/messages"
	pol "github.com/asyncrl/asyncrl/model"
	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// An engine host whose engine failed a version (the term's bucket held
// the base but not yet the delta: a replica's read lagging the write, or
// a command that raced the upload) loads it when the holder resends the
// same LoadWeights, and acks it. Without the retry the agent would count
// the version handled and ignore every resend, and the engine would stay
// out of routing for the rest of the term. A command for a version the
// engine already serves is acked again.
func TestEngineHostRetriesFailedVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bus := clustertest.EmbeddedBus(t)

	cfg := hostRunConfig(t, "rt")
	cfg.Engines.Count = 1
	const node = "n1"
	term := cfg.Run.ID + "-t1"
	engineName := EngineName(node, EndpointKey(0))

	// The term's bucket with its base (the seed's serving weights), as
	// the holder's pipeline uploads it (cluster/node remote.go: every file
	// under BasePrefix; cluster/node's TestEngineHostSharesTheHolderProtocol
	// checks the prefix and scheme are the same).
	nc := store.DefaultNATSConfig("asyncrl-weights-" + term)
	nc.Storage = jetstream.MemoryStorage
	st, err := store.NewNATS(ctx, bus.Conn(), nc)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	baseDir, nextDir := filepath.Join(root, "base"), filepath.Join(root, "v1")
	base, err := pol.New(pol.DefaultConfig(), uint64(cfg.Run.Seed))
	if err != nil {
		t.Fatal(err)
	}
	next, err := pol.New(pol.DefaultConfig(), uint64(cfg.Run.Seed)+1) // other weights: a real delta
	if err != nil {
		t.Fatal(err)
	}
	if err := base.SaveServing(baseDir); err != nil {
		t.Fatal(err)
	}
	if err := next.SaveServing(nextDir); err != nil {
		t.Fatal(err)
	}
	if err := putBase(ctx, st, baseDir); err != nil {
		t.Fatal(err)
	}

	var acks clustertest.AckLog
	ackSubj, err := transport.MustPlan(term).Engine(engineName, transport.EngineAck)
	if err != nil {
		t.Fatal(err)
	}
	ackSub, err := bus.Subscribe(ackSubj, acks.On)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ackSub.Unsubscribe() }()

	var logs syncbuf.Buffer
	var events syncbuf.Buffer
	h, err := Start(cfg, node, bus, zerolog.New(&logs), func(format string, args ...any) {
		fmt.Fprintf(&events, format+"\n", args...)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Stop()

	control, err := transport.MustPlan(cfg.Run.ID).EngineControl(node)
	if err != nil {
		t.Fatal(err)
	}
	load := func(version int64) {
		t.Helper()
		data, err := messages.Encode(messages.LoadWeights{
			Header: messages.Header{RunID: term, Sender: "publisher-0", Version: version},
			Engine: engineName, Format: messages.WeightsDelta, URI: ObjectScheme + nc.Bucket})
		if err != nil {
			t.Fatal(err)
		}
		if err := bus.Publish(ctx, control, data); err != nil {
			t.Fatal(err)
		}
	}

	// Version 1 before its delta is in the bucket: the host follows the
	// term (the base is there), and the engine fails the version.
	load(1)
	clustertest.WaitFor(t, 15*time.Second, "the engine to fail version 1", func() bool {
		for line := range strings.Lines(logs.String()) {
			if strings.Contains(line, "version not loaded") && strings.Contains(line, `"version":1`) &&
				strings.Contains(line, engineName) {
				return true
			}
		}
		return false
	})
	if !strings.Contains(events.String(), "engines follow term "+term) {
		t.Fatalf("the host did not follow term %s:\n%s", term, events.String())
	}
	if acks.Acked(term, engineName, 1) {
		t.Fatal("version 1 acked before its delta was published")
	}

	// The delta appears; the holder resends the same command (the term
	// core resends every 2 s until the engine acks).
	pcfg := delta.DefaultPublisherConfig()
	pcfg.Encode.SpoolDir = t.TempDir()
	pub, err := delta.NewPublisher(ctx, st, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	bsrc, err := safetensors.OpenDir(baseDir)
	if err != nil {
		t.Fatal(err)
	}
	defer bsrc.Close()
	nsrc, err := safetensors.OpenDir(nextDir)
	if err != nil {
		t.Fatal(err)
	}
	defer nsrc.Close()
	if out, err := pub.Publish(ctx, bsrc, nsrc, nextDir); err != nil || out.Version != 1 {
		t.Fatalf("publish: version %d, err %v; want version 1", out.Version, err)
	}
	load(1)
	clustertest.WaitFor(t, 15*time.Second, "the engine to ack version 1 after the resend", func() bool {
		return acks.Acked(term, engineName, 1)
	})
	le := h.Current()[0]
	if v := le.E.Stats().Version; v != 1 {
		t.Errorf("engine serves version %d after acking 1", v)
	}
	if !strings.Contains(events.String(), "engine "+engineName+" caught up to version 1 of term "+term) {
		t.Errorf("no catch-up event for version 1:\n%s", events.String())
	}

	// The same command once more, for a version the engine serves: the
	// holder resends only while it has no ack (lost, or the engine's node
	// left gossip and came back, which makes the holder forget its
	// version), so the host acks again instead of ignoring it.
	load(1)
	clustertest.WaitFor(t, 15*time.Second, "the engine to ack version 1 again", func() bool {
		return acks.Count(term, engineName, 1) >= 2
	})
}

// hostRunConfig is the default run config with run id run and a
// temporary data dir.
func hostRunConfig(t *testing.T, run string) config.Config {
	cfg := config.Default()
	cfg.Run.ID = run
	cfg.Run.DataDir = t.TempDir()
	return cfg
}

// putBase puts every file of dir under BasePrefix in st, as the holder's
// pipeline does.
func putBase(ctx context.Context, st store.Store, dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var files []store.FileObject
	for _, e := range ents {
		if !e.IsDir() {
			files = append(files, store.FileObject{Key: BasePrefix + e.Name(), Path: filepath.Join(dir, e.Name())})
		}
	}
	return store.PutFiles(ctx, st, files, 0)
}
