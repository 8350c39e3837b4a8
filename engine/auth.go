package engine

import (
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/asyncrl/asyncrl/internal/netx"
)

// Sentinel errors of the engine's access control.
var (
	// ErrNoAPIKey: the engine would serve off loopback without an API key.
	ErrNoAPIKey = errors.New("engine: refusing to serve off loopback without an API key (asyncrl engine --api-key-file; engines.api_key_file)")
	// ErrPathNotAllowed: a weight or LoRA path outside the configured
	// weight roots; it is refused before anything under it is opened
	// (HTTP 403).
	ErrPathNotAllowed = errors.New("engine: path outside the weight roots")
)

// WithAPIKey makes every route require "Authorization: Bearer <key>", the
// scheme of vLLM's --api-key (AuthenticationMiddleware in
// vllm/entrypoints/openai/server_utils.py, vllm-project/vllm@029329a8:
// case-insensitive "bearer", 401 {"error": "Unauthorized"}). vLLM guards
// only /v1 paths; the built-in engine guards every route, because its
// control routes (/pause, /update_weights, /collective_rpc, LoRA) are the
// dangerous ones. The key is never logged.
func WithAPIKey(key string) Option { return func(e *Engine) { e.apiKey = key } }

// WithWeightRoots confines weight loads (/update_weights, /collective_rpc
// asyncrl_load_checkpoint and asyncrl_apply_delta, LoRA loads, and the Go
// methods behind them) to directories under roots: a path outside them is
// refused before it is opened. No roots: any path (loopback use).
func WithWeightRoots(roots ...string) Option {
	return func(e *Engine) {
		for _, r := range roots {
			if r == "" {
				continue
			}
			e.roots = append(e.roots, resolve(r))
		}
	}
}

// CheckListen refuses addr off loopback when no API key is set.
func (e *Engine) CheckListen(addr string) error {
	if e.apiKey == "" && !netx.IsLoopback(addr) {
		return fmt.Errorf("%w: listen address %s", ErrNoAPIKey, addr)
	}
	return nil
}

// authorize wraps h: with an API key, a request without it gets 401.
func (e *Engine) authorize(h http.Handler) http.Handler {
	if e.apiKey == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := netx.BearerToken(r.Header.Get("Authorization"))
		if r.Method != http.MethodOptions && (!ok || !netx.TokenEqual(tok, e.apiKey)) {
			e.met.unauthorized.Inc()
			w.Header().Set("WWW-Authenticate", `Bearer realm="asyncrl-engine"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// checkPath refuses a path outside the weight roots (symlinks resolved, so
// a link inside a root cannot point out of it).
func (e *Engine) checkPath(what, path string) error {
	if len(e.roots) == 0 {
		return nil
	}
	p := resolve(path)
	for _, r := range e.roots {
		if p == r || strings.HasPrefix(p, r+string(filepath.Separator)) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s %s is not under %s", ErrPathNotAllowed, what, path, strings.Join(e.roots, ", "))
}

// allowPath is checkPath that also counts and logs a refusal.
func (e *Engine) allowPath(what, path string) error {
	err := e.checkPath(what, path)
	if err != nil {
		e.met.refusedPaths.Inc()
		e.log.Warn().Str("path", path).Msgf("engine: refused a %s load outside the weight roots", what)
	}
	return err
}

// resolve makes p absolute and clean and resolves its symlinks as far as
// they exist (a path not yet there keeps its lexical form).
func resolve(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	// Resolve the longest existing parent so /root/link/missing is judged
	// by where link points.
	dir, rest := abs, ""
	for dir != filepath.Dir(dir) {
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = filepath.Dir(dir)
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
	}
	return abs
}
