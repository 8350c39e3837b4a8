package delta_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/internal/ckpttest"
	"github.com/asyncrl/asyncrl/weights/safetensors"
)

func TestPublisherFullEveryKAndResume(t *testing.T) {
	f := newFixture(t, 11, 4)
	cfg := delta.DefaultPublisherConfig()
	cfg.FullEvery = 2
	ctx := context.Background()
	p, err := delta.NewPublisher(ctx, f.st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= 3; v++ {
		out, err := p.Publish(ctx, f.open(v-1), f.open(v), f.dirs[v])
		if err != nil {
			t.Fatal(err)
		}
		if out.Version != int64(v) || (out.Full != nil) != (v == 2) {
			t.Fatalf("publish %d: version %d, full %v", v, out.Version, out.Full != nil)
		}
	}
	fulls, _ := delta.SnapshotVersions(ctx, f.st, delta.KindFull)
	if !slices.Equal(fulls, []int64{2}) {
		t.Fatalf("full versions %v, want [2]", fulls)
	}
	// A restarted publisher resumes after the newest version.
	p2, err := delta.NewPublisher(ctx, f.st, cfg)
	if err != nil || p2.Version() != 3 {
		t.Fatalf("resumed at %d, %v", p2.Version(), err)
	}
	out, err := p2.Publish(ctx, f.open(3), f.open(4), f.dirs[4])
	if err != nil || out.Version != 4 || out.Full == nil {
		t.Fatalf("publish 4 = %+v, %v", out, err)
	}
	// The full checkpoint comes back byte for byte and verified.
	dst := filepath.Join(t.TempDir(), "full")
	if _, err := delta.FetchSnapshot(ctx, f.st, delta.KindFull, 2, dst, 2); err != nil {
		t.Fatal(err)
	}
	if d := ckpttest.SameDir(dst, f.dirs[2]); d != "" {
		t.Fatal(d)
	}
	// A damaged full file is caught.
	key := delta.SnapshotDir(delta.KindFull, 2)
	ents, _ := os.ReadDir(f.st.Path(key))
	for _, e := range ents {
		if e.Name() != delta.ManifestName {
			os.WriteFile(filepath.Join(f.st.Path(key), e.Name()), []byte("garbage"), 0o644)
			break
		}
	}
	if _, err := delta.FetchSnapshot(ctx, f.st, delta.KindFull, 2, t.TempDir(), 2); !errors.Is(err, delta.ErrChecksum) {
		t.Fatalf("damaged full checkpoint: %v", err)
	}
}

func TestPublishLoRA(t *testing.T) {
	f := newFixture(t, 12, 0)
	ctx := context.Background()
	p, _ := delta.NewPublisher(ctx, f.st, delta.DefaultPublisherConfig())
	dir := t.TempDir()
	if _, err := p.PublishLoRA(ctx, dir); err == nil {
		t.Fatal("an empty adapter dir was published")
	}
	safetensors.WriteFile(filepath.Join(dir, delta.LoRAWeightsName), f.ckpts[0][:2], nil)
	if _, err := p.PublishLoRA(ctx, dir); err == nil {
		t.Fatal("an adapter without adapter_config.json was published")
	}
	os.WriteFile(filepath.Join(dir, delta.LoRAConfigName), []byte(`{"r":8,"lora_alpha":16}`), 0o644)
	for want := int64(1); want <= 2; want++ {
		m, err := p.PublishLoRA(ctx, dir)
		if err != nil || m.Version != want || m.Kind != "lora" || len(m.Files) != 2 {
			t.Fatalf("LoRA publish = %+v, %v", m, err)
		}
	}
	dst := t.TempDir()
	if _, err := delta.FetchSnapshot(ctx, f.st, delta.KindLoRA, 2, dst, 2); err != nil {
		t.Fatal(err)
	}
	if d := ckpttest.SameDir(dst, dir); d != "" {
		t.Fatal(d)
	}
	if p.Version() != 0 {
		t.Fatalf("LoRA versions moved the delta version to %d", p.Version())
	}
}
