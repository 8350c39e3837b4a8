package sft

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNoCheckpoint is returned by Resume when the output directory holds no
// checkpoint.
var ErrNoCheckpoint = errors.New("sft: no checkpoint to resume from")

// LatestName is the symlink in the output directory naming the newest
// checkpoint (step-NNNNNNNN).
const LatestName = "latest"

// stateVersion is state.json's format version.
const stateVersion = 1

// savedState is a checkpoint's state.json.
type savedState struct {
	Version int    `json:"version"`
	Step    int64  `json:"step"`
	Backend string `json:"backend"`
	// Sampler is the stream's State() after the step's examples.
	Sampler []byte `json:"sampler"`
	// Report is the run's report up to and including the step.
	Report Report `json:"report"`
}

// StepDir is a step's checkpoint directory in out.
func StepDir(out string, step int64) string {
	return filepath.Join(out, fmt.Sprintf("step-%08d", step))
}

// saveCheckpoint writes step's checkpoint: the backend's weights and state
// and state.json, under a temporary name renamed into place, then points
// latest at it.
func saveCheckpoint(ctx context.Context, out string, be backend, st savedState) (string, error) {
	final := StepDir(out, st.Step)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", fmt.Errorf("sft: %w", err)
	}
	tmp, err := os.MkdirTemp(out, "."+filepath.Base(final)+".tmp-")
	if err != nil {
		return "", fmt.Errorf("sft: %w", err)
	}
	defer os.RemoveAll(tmp) // after a successful rename there is nothing left
	if err := be.Save(ctx, tmp); err != nil {
		return "", fmt.Errorf("sft: checkpoint of step %d: %w", st.Step, err)
	}
	js, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return "", err
	}
	if err := writeFileSync(filepath.Join(tmp, StateFile), js); err != nil {
		return "", fmt.Errorf("sft: checkpoint of step %d: %w", st.Step, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("sft: %w", err)
	}
	if err := os.RemoveAll(final); err != nil { // a step written by an earlier, abandoned run
		return "", fmt.Errorf("sft: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("sft: %w", err)
	}
	link := filepath.Join(out, "."+LatestName+".tmp")
	_ = os.Remove(link)
	if err := os.Symlink(filepath.Base(final), link); err != nil {
		return "", fmt.Errorf("sft: %w", err)
	}
	if err := os.Rename(link, filepath.Join(out, LatestName)); err != nil {
		return "", fmt.Errorf("sft: %w", err)
	}
	return final, nil
}

func writeFileSync(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// latestCheckpoint is the newest complete checkpoint in out: latest's
// target, else the highest step-NNNNNNNN holding a state.json.
func latestCheckpoint(out string) (string, savedState, error) {
	var cands []string
	if target, err := os.Readlink(filepath.Join(out, LatestName)); err == nil {
		cands = append(cands, filepath.Join(out, target))
	}
	ents, err := os.ReadDir(out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", savedState{}, fmt.Errorf("sft: %w", err)
	}
	for i := len(ents) - 1; i >= 0; i-- { // ReadDir sorts: highest step last
		if n := ents[i].Name(); strings.HasPrefix(n, "step-") && ents[i].IsDir() {
			cands = append(cands, filepath.Join(out, n))
		}
	}
	for _, dir := range cands {
		js, err := os.ReadFile(filepath.Join(dir, StateFile))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", savedState{}, fmt.Errorf("sft: %w", err)
		}
		var st savedState
		if err := json.Unmarshal(js, &st); err != nil {
			return "", savedState{}, fmt.Errorf("sft: %s: %w", filepath.Join(dir, StateFile), err)
		}
		if st.Version != stateVersion {
			return "", savedState{}, fmt.Errorf("sft: %s: state version %d, this asyncrl reads %d", filepath.Join(dir, StateFile), st.Version, stateVersion)
		}
		return dir, st, nil
	}
	return "", savedState{}, fmt.Errorf("%w in %s", ErrNoCheckpoint, out)
}
