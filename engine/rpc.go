package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/asyncrl/asyncrl/internal/fsutil"
	"github.com/asyncrl/asyncrl/weights/delta"
)

// The collective_rpc methods the built-in engine answers: the same three
// that asyncrl's vLLM worker extension (integrations/vllm,
// asyncrl_vllm.WorkerExtension) adds to vLLM's workers.
const (
	RPCLoadCheckpoint = "asyncrl_load_checkpoint" // (dir, version) → version
	RPCApplyDelta     = "asyncrl_apply_delta"     // (dir, version) → version
	RPCLoadedVersion  = "asyncrl_loaded_version"  // () → version
)

// ErrNoCheckpoint: ApplyDelta needs the engine's weights to have come from a
// checkpoint directory (LoadWeights), which it patches a copy of.
var ErrNoCheckpoint = errors.New("engine: no checkpoint directory to apply a delta to (load a full checkpoint first)")

// CollectiveRPCRequest is the body of POST /collective_rpc, as vLLM reads
// it (vllm/entrypoints/serve/dev/rpc/api_router.py): args and kwargs are
// passed to the method of every worker.
type CollectiveRPCRequest struct {
	Method  *string                    `json:"method"`
	Args    []json.RawMessage          `json:"args"`
	Kwargs  map[string]json.RawMessage `json:"kwargs"`
	Timeout *float64                   `json:"timeout"`
}

// CollectiveRPCResponse is its answer: one result per worker (the built-in
// engine has one). vLLM stringifies a result that is not null, a dict or a
// list, so asyncrl_loaded_version's int comes back as "7"; the loads answer
// {"version": 7} as asyncrl_vllm's methods return.
type CollectiveRPCResponse struct {
	Results []any `json:"results"`
}

// deltaState is the working copy ApplyDelta patches.
type deltaState struct {
	mu      sync.Mutex // serialises ApplyDelta
	dir     string     // WithWorkDir, or a temp dir made on first use
	madeTmp bool
}

// WithWorkDir sets the directory where ApplyDelta keeps its mutable copy of
// the checkpoint (default: a temporary directory, removed by Close).
func WithWorkDir(dir string) Option { return func(e *Engine) { e.delta.dir = dir } }

// CheckpointDir is the directory the served weights were loaded from ("" when
// they came from SetModel or a failed delta left the copy dirty).
func (e *Engine) CheckpointDir() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ckptDir
}

// ApplyDelta applies one SkyRL-format delta version (dir holds its
// manifest.json and payload files, as weights/delta writes delta-{v:08d}/)
// to the checkpoint the engine serves and serves the result at version.
// The manifest must say version == version and base_version == the served
// version. The engine patches its own copy of the checkpoint (WithWorkDir)
// and loads it with the loader; on any error the served weights are
// unchanged (a copy left half-patched is discarded: the next delta then
// needs a full load first).
func (e *Engine) ApplyDelta(ctx context.Context, dir string, version int64) error {
	if e.loader == nil {
		return ErrNoLoader
	}
	if err := e.allowPath("delta", dir); err != nil {
		return err
	}
	man, err := readDeltaManifest(dir, version)
	if err != nil {
		return err
	}
	e.delta.mu.Lock()
	defer e.delta.mu.Unlock()
	e.mu.Lock()
	cur, ckpt, loaded := e.version, e.ckptDir, e.model != nil
	e.mu.Unlock()
	if noop, err := deltaFits(man, dir, version, cur, ckpt, loaded); noop || err != nil {
		return err
	}
	work, err := e.workDir()
	if err != nil {
		return err
	}
	if ckpt != work {
		if err := copyCheckpoint(ckpt, work); err != nil {
			return fmt.Errorf("engine: apply delta %d: copying %s: %w", version, ckpt, err)
		}
	}
	if err := e.patchAndServe(ctx, man, dir, work, version); err != nil {
		e.mu.Lock()
		if e.ckptDir == work {
			e.ckptDir = ""
		}
		e.mu.Unlock()
		return err
	}
	e.mu.Lock()
	e.ckptDir = work
	e.mu.Unlock()
	return nil
}

// readDeltaManifest reads and parses dir's manifest.json.
func readDeltaManifest(dir string, version int64) (*delta.Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, delta.ManifestName))
	if err != nil {
		return nil, fmt.Errorf("engine: apply delta %d: %w", version, err)
	}
	man, err := delta.ParseManifest(data)
	if err != nil {
		return nil, fmt.Errorf("engine: apply delta %s: %w", dir, err)
	}
	return man, nil
}

// deltaFits says whether delta man (asked for as version) applies to the
// served version cur from checkpoint ckpt: noop when it is already applied,
// an error when it does not chain on.
func deltaFits(man *delta.Manifest, dir string, version, cur int64, ckpt string, loaded bool) (noop bool, err error) {
	switch {
	case man.Version != version:
		return false, fmt.Errorf("engine: apply delta %s: %w: manifest says version %d, asked for %d", dir, delta.ErrChain, man.Version, version)
	case loaded && version == cur && ckpt != "":
		return true, nil // already applied: a no-op, as in asyncrl_vllm
	case loaded && version < cur:
		return false, fmt.Errorf("%w: serving %d, got %d", ErrVersionDecrease, cur, version)
	case ckpt == "":
		return false, ErrNoCheckpoint
	case man.BaseVersion != cur:
		return false, fmt.Errorf("engine: apply delta %s: %w: version %d has base_version %d, the engine serves %d", dir, delta.ErrChain, version, man.BaseVersion, cur)
	}
	return false, nil
}

// patchAndServe patches the work copy with the delta, loads it and serves
// it at version; on error the caller marks the copy dirty.
func (e *Engine) patchAndServe(ctx context.Context, man *delta.Manifest, dir, work string, version int64) error {
	mut, err := delta.OpenMutable(work)
	if err != nil {
		return fmt.Errorf("engine: apply delta %d: %w", version, err)
	}
	_, err = delta.Apply(ctx, delta.DefaultApplyConfig(), man, dir, mut)
	if cerr := mut.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("engine: apply delta %d: %w", version, err)
	}
	m, err := e.loader(work)
	if err != nil {
		return fmt.Errorf("engine: load weights patched to %d: %w", version, err)
	}
	return e.SetModel(m, version)
}

func (e *Engine) workDir() (string, error) {
	if e.delta.dir != "" {
		return e.delta.dir, os.MkdirAll(e.delta.dir, 0o755)
	}
	d, err := os.MkdirTemp("", "asyncrl-engine-weights-*")
	if err != nil {
		return "", fmt.Errorf("engine: delta work dir: %w", err)
	}
	e.delta.dir, e.delta.madeTmp = d, true
	return d, nil
}

// removeWorkDir deletes a temporary work dir (Close).
func (e *Engine) removeWorkDir() {
	e.delta.mu.Lock()
	defer e.delta.mu.Unlock()
	if e.delta.madeTmp {
		_ = os.RemoveAll(e.delta.dir)
		e.delta.dir, e.delta.madeTmp = "", false
	}
}

// copyCheckpoint replaces dst's files with src's regular files (a HF
// checkpoint directory is flat: config.json, *.safetensors, the index).
func copyCheckpoint(src, dst string) error {
	old, err := os.ReadDir(dst)
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.RemoveAll(filepath.Join(dst, f.Name())); err != nil {
			return err
		}
	}
	return fsutil.CopyDir(dst, src)
}

// rpcArgs reads (dir, version) from positional args or kwargs; version may
// be a JSON number or a numeric string (vLLM passes serialized strings).
func rpcArgs(req *CollectiveRPCRequest) (string, int64, error) {
	var dirRaw, verRaw json.RawMessage
	if len(req.Args) > 0 {
		dirRaw = req.Args[0]
	}
	if len(req.Args) > 1 {
		verRaw = req.Args[1]
	}
	if v, ok := req.Kwargs["dir"]; ok {
		dirRaw = v
	}
	if v, ok := req.Kwargs["version"]; ok {
		verRaw = v
	}
	var dir string
	if dirRaw == nil || json.Unmarshal(dirRaw, &dir) != nil || dir == "" {
		return "", 0, fmt.Errorf("%s: first argument (dir) must be a non-empty string", *req.Method)
	}
	if verRaw == nil {
		return "", 0, fmt.Errorf("%s: second argument (version) is missing", *req.Method)
	}
	var v int64
	if json.Unmarshal(verRaw, &v) == nil {
		return dir, v, nil
	}
	var s string
	if json.Unmarshal(verRaw, &s) == nil {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return dir, n, nil
		}
	}
	return "", 0, fmt.Errorf("%s: second argument (version) must be an integer, got %s", *req.Method, verRaw)
}

// handleCollectiveRPC answers POST /collective_rpc with vLLM's shapes.
func (e *Engine) handleCollectiveRPC(w http.ResponseWriter, r *http.Request) {
	var req CollectiveRPCRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Method == nil {
		writeError(w, http.StatusBadRequest, "method", "Missing 'method' in request body")
		return
	}
	ctx := r.Context()
	if req.Timeout != nil && *req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, secondsDuration(*req.Timeout))
		defer cancel()
	}
	var err error
	switch *req.Method {
	case RPCLoadCheckpoint, RPCApplyDelta:
		dir, v, aerr := rpcArgs(&req)
		if aerr != nil {
			writeError(w, http.StatusBadRequest, "args", "%v", aerr)
			return
		}
		if *req.Method == RPCLoadCheckpoint {
			err = e.LoadWeights(dir, v)
		} else {
			err = e.ApplyDelta(ctx, dir, v)
		}
	case RPCLoadedVersion:
	default:
		// vLLM's worker raises AttributeError and the route answers 500.
		writeError(w, http.StatusInternalServerError, "method",
			"AttributeError: 'Worker' object has no attribute '%s' (the built-in engine answers %s, %s and %s)",
			*req.Method, RPCLoadCheckpoint, RPCApplyDelta, RPCLoadedVersion)
		return
	}
	if err != nil {
		e.writeRPCError(w, *req.Method, err)
		return
	}
	v := e.Version()
	w.Header().Set("X-Weight-Version", strconv.FormatInt(v, 10))
	// As asyncrl_vllm answers: loads return {"version": v}; the version
	// query returns an int, which vLLM's route stringifies.
	var res any = map[string]int64{"version": v}
	if *req.Method == RPCLoadedVersion {
		res = strconv.FormatInt(v, 10)
	}
	writeJSON(w, http.StatusOK, CollectiveRPCResponse{Results: []any{res}})
}

func (e *Engine) writeRPCError(w http.ResponseWriter, method string, err error) {
	switch {
	case errors.Is(err, ErrVersionDecrease), errors.Is(err, delta.ErrChain), errors.Is(err, ErrNoCheckpoint):
		writeError(w, http.StatusConflict, "version", "%s: %v", method, err)
	case errors.Is(err, ErrNoLoader):
		writeError(w, http.StatusNotImplemented, "", "%s: %v", method, err)
	case errors.Is(err, ErrPathNotAllowed):
		writeError(w, http.StatusForbidden, "args", "%s: %v", method, err)
	case errors.Is(err, ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "", "%s: %v", method, err)
	default:
		writeError(w, http.StatusInternalServerError, "", "%s: %v", method, err)
	}
}

func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
