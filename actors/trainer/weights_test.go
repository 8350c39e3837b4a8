package trainer

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/asyncrl/asyncrl/actors/publisher"
	"github.com/asyncrl/asyncrl/model"
)

func writeConfig(t *testing.T, dir, js string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, model.ConfigFileName), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A child's serving checkpoint of another architecture is handed on as a
// directory, after CheckDir; the built-in policy's is loaded as well.
func TestExecWeightsByArchitecture(t *testing.T) {
	root := t.TempDir()
	hf := filepath.Join(root, "v00000001")
	writeConfig(t, hf, `{"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}`)
	var checked []string
	e := &Exec{check: func(dir string) error { checked = append(checked, dir); return nil }}
	w, err := e.weights(hf)
	if err != nil || w.Dir != hf || w.Model != nil || len(checked) != 1 || checked[0] != hf {
		t.Fatalf("weights(hf) = %+v, %v (checked %v); want the directory, checked once", w, err, checked)
	}
	bad := errors.New("tensor model.norm.weight missing")
	e.check = func(string) error { return bad }
	if _, err := e.weights(hf); !errors.Is(err, bad) {
		t.Fatalf("a failed check = %v, want it returned", err)
	}

	m, err := model.New(model.DefaultConfig(), 3)
	if err != nil {
		t.Fatal(err)
	}
	builtin := filepath.Join(root, "v00000002")
	if err := m.SaveServing(builtin); err != nil {
		t.Fatal(err)
	}
	if w, err = e.weights(builtin); err != nil || w.Model == nil || w.Dir != builtin {
		t.Fatalf("weights(builtin) = %+v, %v; want the loaded policy and its directory", w, err)
	}

	writeConfig(t, filepath.Join(root, "none"), `{"architectures": ["X"]}`)
	if _, err := e.weights(filepath.Join(root, "none")); !errors.Is(err, model.ErrCheckpoint) {
		t.Fatalf("a config.json without model_type = %v, want ErrCheckpoint", err)
	}
}

// Only the newest KeepServing serving directories stay on disk.
func TestExecPrunesOldServingDirs(t *testing.T) {
	root := t.TempDir()
	e := &Exec{keep: 2}
	var dirs []string
	for v := 1; v <= 4; v++ {
		d := publisher.CheckpointDir(root, int64(v))
		writeConfig(t, d, `{"model_type": "llama"}`)
		dirs = append(dirs, d)
		e.prune(d)
	}
	for i, d := range dirs {
		_, err := os.Stat(d)
		if kept := i >= 2; kept != (err == nil) {
			t.Errorf("%s: kept=%v, stat err %v", d, kept, err)
		}
	}
}
