package enginetest_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/asyncrl/asyncrl/engine"
	"github.com/asyncrl/asyncrl/engine/driver"
	"github.com/asyncrl/asyncrl/engine/enginetest"
	"github.com/asyncrl/asyncrl/model/tokenizer"
	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// seedOf reads the checkpoint's "seed" tensor: the test loader serves a
// HashModel seeded by it, so the served model shows which bytes were
// loaded.
func seedOf(dir string) (uint64, error) {
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return 0, err
	}
	defer ck.Close()
	f, _, err := ck.ReadFloat32("seed")
	if err != nil {
		return 0, err
	}
	return uint64(f[0]), nil
}

func loader(dir string) (engine.Model, error) {
	s, err := seedOf(dir)
	if err != nil {
		return nil, err
	}
	return engine.NewHashModel(s), nil
}

func seedTensors(seed float32) []safetensors.Tensor {
	return []safetensors.Tensor{
		{Name: "seed", DType: safetensors.F32, Shape: []int64{1}, Data: safetensors.EncodeF32([]float32{seed})},
		{Name: "w", DType: safetensors.BF16, Shape: []int64{4}, Data: safetensors.EncodeBF16([]float32{0.5, -1, 2, seed / 100})},
	}
}

// writeWeights writes checkpoint version 0 (seed 7) under root/ckpt and delta
// version 1 (seed 11) under root/sync/delta-00000001, as weights/delta
// publishes it.
func writeWeights(t *testing.T, root string) (ckpt, deltaDir string) {
	t.Helper()
	ckpt = filepath.Join(root, "ckpt")
	if err := os.MkdirAll(ckpt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteFile(filepath.Join(ckpt, safetensors.SingleFileName), seedTensors(7), nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ckpt, "config.json"), []byte(`{"model_type":"hash"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := store.NewLocal(filepath.Join(root, "sync"))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := delta.NewMemSource(seedTensors(7))
	next, _ := delta.NewMemSource(seedTensors(11))
	if _, err := delta.Encode(context.Background(), delta.DefaultEncodeConfig(), base, next, 1, st); err != nil {
		t.Fatal(err)
	}
	return ckpt, filepath.Join(root, "sync", delta.DeltaDir(1))
}

func builtin(t *testing.T, opts ...engine.Option) (*engine.Engine, string) {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	cfg.MaxModelLen = 256
	e, err := engine.New(cfg, engine.NewHashModel(1), append([]engine.Option{engine.WithLoader(loader), engine.WithWorkDir(t.TempDir())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	t.Cleanup(func() {
		e.Close()
		srv.Close()
	})
	return e, srv.URL
}

var prompt = append([]int32{tokenizer.BOS}, tokenizer.Encode("2+2=")...)

// The built-in engine passes the conformance suite with every option:
// checkpoint load, delta replay, LoRA, sleep.
func TestBuiltinConforms(t *testing.T) {
	root := t.TempDir()
	ckpt, deltaDir := writeWeights(t, root)
	e, url := builtin(t)
	enginetest.Run(t, url, driver.KindBuiltin,
		enginetest.WithPrompt(prompt),
		enginetest.WithCheckpoint(ckpt, 0),
		enginetest.WithDelta(deltaDir, 1),
		enginetest.WithLoRA("policy", ckpt))
	if e.Version() != 1 {
		t.Fatalf("version %d after the suite, want the delta's 1", e.Version())
	}
}

// A delta replayed through /collective_rpc serves exactly the weights the
// delta encodes (seed 11), at the delta's version; the checkpoint it was
// applied to is left untouched.
func TestBuiltinApplyDelta(t *testing.T) {
	root := t.TempDir()
	ckpt, deltaDir := writeWeights(t, root)
	e, url := builtin(t)
	d, err := driver.New(driver.KindBuiltin, url, driver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.ApplyDelta(ctx, deltaDir, 1); err == nil {
		t.Fatal("a delta with no checkpoint loaded was applied")
	}
	if err := d.LoadCheckpoint(ctx, ckpt, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.ApplyDelta(ctx, deltaDir, 2); err == nil {
		t.Fatal("a delta was applied under another version than its manifest's")
	}
	if err := d.ApplyDelta(ctx, deltaDir, 1); err != nil {
		t.Fatal(err)
	}
	if v, err := d.ServedVersion(ctx); err != nil || v != 1 {
		t.Fatalf("served %d, %v", v, err)
	}
	if s, err := seedOf(e.CheckpointDir()); err != nil || s != 11 {
		t.Fatalf("patched checkpoint seed %d, %v; want 11", s, err)
	}
	if s, _ := seedOf(ckpt); s != 7 {
		t.Fatalf("the loaded checkpoint was modified: seed %d", s)
	}
	// Same tokens as a model loaded directly from seed 11.
	want, got := genWith(t, engine.NewHashModel(11)), genIDs(t, d)
	if len(want) != len(got) || want[0] != got[0] {
		t.Fatalf("after the delta: %v, a seed-11 engine: %v", got, want)
	}
	// The served version again is a no-op (as in asyncrl_vllm); an older
	// one is refused.
	if err := d.ApplyDelta(ctx, deltaDir, 1); err != nil {
		t.Fatalf("re-applying the served delta: %v", err)
	}
	if s, _ := seedOf(e.CheckpointDir()); s != 11 {
		t.Fatalf("re-applying patched the copy again: seed %d", s)
	}
	if err := d.LoadCheckpoint(ctx, ckpt, 0); err == nil {
		t.Fatal("an older checkpoint version was loaded")
	}
}

// A corrupt payload leaves the served weights and version as they were.
func TestBuiltinApplyDeltaCorrupt(t *testing.T) {
	root := t.TempDir()
	ckpt, deltaDir := writeWeights(t, root)
	e, url := builtin(t)
	d, _ := driver.New(driver.KindBuiltin, url, driver.Options{})
	ctx := context.Background()
	if err := d.LoadCheckpoint(ctx, ckpt, 0); err != nil {
		t.Fatal(err)
	}
	before := genIDs(t, d)
	payload := filepath.Join(deltaDir, delta.PayloadFileName(0, 0))
	b, err := os.ReadFile(payload)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-3] ^= 0xff
	if err := os.WriteFile(payload, b, 0o644); err != nil {
		t.Fatal(err)
	}
	err = d.ApplyDelta(ctx, deltaDir, 1)
	var re *driver.RouteError
	if !errors.As(err, &re) || re.Status < 400 {
		t.Fatalf("corrupt delta: %v", err)
	}
	if e.Version() != 0 {
		t.Fatalf("version %d after a failed delta", e.Version())
	}
	if after := genIDs(t, d); after[0] != before[0] {
		t.Fatalf("served tokens changed after a failed delta: %v → %v", before, after)
	}
}

func genIDs(t *testing.T, d driver.Driver) []int32 {
	t.Helper()
	res, err := d.Generate(context.Background(), driver.GenerateRequest{PromptIDs: prompt, MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	return res.TokenIDs
}

func genWith(t *testing.T, m engine.Model) []int32 {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.TimeScale = 0
	cfg.MaxModelLen = 256
	e, err := engine.New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e.Handler())
	defer func() { e.Close(); srv.Close() }()
	d, _ := driver.New(driver.KindBuiltin, srv.URL, driver.Options{})
	return genIDs(t, d)
}

// The fakes built from the fixtures pass the suite too (the fixtures are
// self-consistent), and a vLLM fake without dev mode fails it.
func TestFakesConform(t *testing.T) {
	v := enginetest.NewFake(driver.KindVLLM, enginetest.FakeOptions{DevMode: true, LoRA: true, Extension: true})
	defer v.Close()
	enginetest.Run(t, v.URL, driver.KindVLLM, enginetest.WithCheckpoint("/ckpt/full-00000003", 3), enginetest.WithDelta("/sync/delta-00000004", 4))
	s := enginetest.NewFake(driver.KindSGLang, enginetest.FakeOptions{LoRA: true})
	defer s.Close()
	enginetest.Run(t, s.URL, driver.KindSGLang, enginetest.WithCheckpoint("/ckpt/full-00000003", 3), enginetest.WithDelta("/sync/delta-00000004", 4))
	http.DefaultClient.CloseIdleConnections()
}
