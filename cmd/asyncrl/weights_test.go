package main

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/asyncrl/asyncrl/weights/safetensors"
)

// writeCkpt writes a small BF16 checkpoint; bump changes ~2% of elements.
func writeCkpt(t *testing.T, dir string, seed uint64, bump int) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	r := rand.New(rand.NewPCG(seed, 0))
	var ts []safetensors.Tensor
	for i, n := range []int{4096, 1000, 64} {
		f := make([]float32, n)
		for j := range f {
			f[j] = float32(r.NormFloat64() * 0.02)
		}
		for k := 0; k < bump; k++ {
			for j := k; j < n; j += 50 * bump {
				f[j] *= 1.25
			}
		}
		ts = append(ts, safetensors.Tensor{Name: "layer." + string(rune('a'+i)), DType: safetensors.BF16, Shape: []int64{int64(n)}, Data: safetensors.EncodeBF16(f)})
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
}

func TestWeightsDiffApplyVerify(t *testing.T) {
	tmp := t.TempDir()
	v0, v1, v2, root := filepath.Join(tmp, "v0"), filepath.Join(tmp, "v1"), filepath.Join(tmp, "v2"), filepath.Join(tmp, "sync")
	writeCkpt(t, v0, 1, 0)
	writeCkpt(t, v1, 1, 1)
	writeCkpt(t, v2, 1, 2)

	code, out, errOut := cli(t, "weights", "diff", "--base", v0, "--new", v1, "--out", root, "--json")
	if code != 0 {
		t.Fatalf("diff v1: %d %s", code, errOut)
	}
	var js map[string]any
	if err := json.Unmarshal([]byte(out), &js); err != nil || js["version"] != 1.0 || js["base_version"] != 0.0 || js["tensors_changed"] != 3.0 {
		t.Fatalf("diff --json: %s (%v)", out, err)
	}
	if code, out, errOut = cli(t, "weights", "diff", "--base", v1, "--new", v2, "--out", root, "--version", "2"); code != 0 || !strings.Contains(out, "version 2 (base 1)") {
		t.Fatalf("diff v2: %d %q %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(root, "delta-00000002", "manifest.json")); err != nil {
		t.Fatal(err)
	}
	if code, out, _ = cli(t, "weights", "verify", "--root", root); code != 0 || strings.Count(out, ": ok") != 2 {
		t.Fatalf("verify: %d %q", code, out)
	}

	work := filepath.Join(tmp, "work")
	os.MkdirAll(work, 0o755)
	base, _ := os.ReadFile(filepath.Join(v0, "model.safetensors"))
	os.WriteFile(filepath.Join(work, "model.safetensors"), base, 0o644)
	if code, out, errOut = cli(t, "weights", "apply", "--root", root, "--checkpoint", work, "--to", "1"); code != 0 || !strings.Contains(out, "version 0 → 1") {
		t.Fatalf("apply --to 1: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = cli(t, "weights", "apply", "--root", root, "--checkpoint", work, "--json"); code != 0 {
		t.Fatalf("apply to newest: %d %q", code, errOut)
	}
	json.Unmarshal([]byte(out), &js)
	if js["from"] != 1.0 || js["version"] != 2.0 {
		t.Fatalf("apply --json: %s", out)
	}
	got, _ := os.ReadFile(filepath.Join(work, "model.safetensors"))
	want, _ := os.ReadFile(filepath.Join(v2, "model.safetensors"))
	if !bytes.Equal(got, want) {
		t.Fatal("applied copy differs from v2")
	}
	if code, _, errOut = cli(t, "weights", "apply", "--root", root, "--checkpoint", work, "--to", "1"); code != 1 || !strings.Contains(errOut, "newer than --to 1") {
		t.Fatalf("apply backwards: %d %q", code, errOut)
	}

	// A corrupted payload: verify fails, apply refuses and marks the copy.
	pf := filepath.Join(root, "delta-00000002", "delta-rank00000-file000000.safetensors")
	good, _ := os.ReadFile(pf)
	os.WriteFile(pf, good[:len(good)-2], 0o644)
	if code, out, errOut = cli(t, "weights", "verify", "--root", root); code != 1 || !strings.Contains(out, "delta-00000002: delta: corrupt payload") || !strings.Contains(errOut, "1 of 2 versions failed") {
		t.Fatalf("verify of a corrupt root: %d %q %q", code, out, errOut)
	}
	os.WriteFile(filepath.Join(work, "model.safetensors"), base, 0o644)
	os.Remove(filepath.Join(work, localVersionFile))
	if code, _, errOut = cli(t, "weights", "apply", "--root", root, "--checkpoint", work); code != 1 || !strings.Contains(errOut, "half-applied") {
		t.Fatalf("apply over a corrupt version: %d %q", code, errOut)
	}
	if code, _, errOut = cli(t, "weights", "apply", "--root", root, "--checkpoint", work); code != 1 || !strings.Contains(errOut, "--from 0") {
		t.Fatalf("apply of a half-applied copy: %d %q", code, errOut)
	}
	os.WriteFile(pf, good, 0o644)
	os.WriteFile(filepath.Join(work, "model.safetensors"), base, 0o644)
	if code, _, errOut = cli(t, "weights", "apply", "--root", root, "--checkpoint", work, "--from", "0"); code != 0 {
		t.Fatalf("apply after restoring: %d %q", code, errOut)
	}
	got, _ = os.ReadFile(filepath.Join(work, "model.safetensors"))
	if !bytes.Equal(got, want) {
		t.Fatal("repaired copy differs from v2")
	}
}

func TestWeightsBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{"weights", "diff", "--base", "x"},
		{"weights", "diff", "--base", "x", "--new", "y", "--out", t.TempDir(), "--version", "0"},
		{"weights", "diff", "--base", "/nonexistent", "--new", "/nonexistent", "--out", t.TempDir()},
		{"weights", "apply", "--root", t.TempDir()},
		{"weights", "verify"},
		{"weights", "verify", "--root", "/nonexistent/root"},
	} {
		if code, _, errOut := cli(t, args...); code != 1 || !strings.HasPrefix(errOut, "asyncrl weights") {
			t.Errorf("%v: code %d, stderr %q", args, code, errOut)
		}
	}
}

func TestWeightsOverS3(t *testing.T) {
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	defer srv.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	root := "s3://weights/run1?create=true&region=us-east-1&endpoint=" + strings.TrimPrefix(srv.URL, "http://")
	tmp := t.TempDir()
	v0, v1 := filepath.Join(tmp, "v0"), filepath.Join(tmp, "v1")
	writeCkpt(t, v0, 5, 0)
	writeCkpt(t, v1, 5, 1)
	if code, out, errOut := cli(t, "weights", "diff", "--base", v0, "--new", v1, "--out", root); code != 0 || !strings.Contains(out, "delta-00000001") {
		t.Fatalf("diff to S3: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := cli(t, "weights", "verify", "--root", root); code != 0 || !strings.Contains(out, "delta-00000001: ok") {
		t.Fatalf("verify on S3: %d %q %q", code, out, errOut)
	}
	work := filepath.Join(tmp, "work")
	os.MkdirAll(work, 0o755)
	base, _ := os.ReadFile(filepath.Join(v0, "model.safetensors"))
	os.WriteFile(filepath.Join(work, "model.safetensors"), base, 0o644)
	if code, _, errOut := cli(t, "weights", "apply", "--root", root, "--checkpoint", work); code != 0 {
		t.Fatalf("apply from S3: %d %q", code, errOut)
	}
	got, _ := os.ReadFile(filepath.Join(work, "model.safetensors"))
	want, _ := os.ReadFile(filepath.Join(v1, "model.safetensors"))
	if !bytes.Equal(got, want) {
		t.Fatal("checkpoint applied from S3 differs from v1")
	}
}

func TestWeightsSnapshot(t *testing.T) {
	tmp := t.TempDir()
	v0, root := filepath.Join(tmp, "v0"), filepath.Join(tmp, "sync")
	writeCkpt(t, v0, 3, 0)
	if code, out, errOut := cli(t, "weights", "snapshot", "--dir", v0, "--out", root); code != 0 || !strings.HasPrefix(out, "full-00000000: 1 files") {
		t.Fatalf("full snapshot: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := cli(t, "weights", "snapshot", "--dir", v0, "--out", root); code != 1 || !strings.Contains(errOut, "already committed") {
		t.Fatalf("second full snapshot of v0: %d %q", code, errOut)
	}
	if code, _, errOut := cli(t, "weights", "snapshot", "--kind", "lora", "--dir", v0, "--out", root); code != 1 || !strings.Contains(errOut, "adapter_config.json") {
		t.Fatalf("LoRA without adapter files: %d %q", code, errOut)
	}
	ad := filepath.Join(tmp, "adapter")
	os.MkdirAll(ad, 0o755)
	b, _ := os.ReadFile(filepath.Join(v0, "model.safetensors"))
	os.WriteFile(filepath.Join(ad, "adapter_model.safetensors"), b, 0o644)
	os.WriteFile(filepath.Join(ad, "adapter_config.json"), []byte(`{"r": 8}`), 0o644)
	code, out, errOut := cli(t, "weights", "snapshot", "--kind", "lora", "--dir", ad, "--out", root, "--json")
	var js map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || js["kind"] != "lora" || js["version"] != 1.0 {
		t.Fatalf("LoRA snapshot: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := cli(t, "weights", "snapshot", "--kind", "delta", "--dir", ad, "--out", root); code != 1 || !strings.Contains(errOut, "want full or lora") {
		t.Fatalf("bad kind: %d %q", code, errOut)
	}
}
