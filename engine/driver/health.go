package driver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"
)

// ProbeHealth is the health probe of one engine of any kind, for a caller
// that does not know the kind (the router, which knows its replicas by
// URL only). The engine is healthy when GET /health answers 200 within
// half of ctx's time, or else when GET /get_model_info answers 200 with
// SGLang's model-info object in the rest.
//
// The second route is there because SGLang's /health is not a liveness
// check: it submits a one-token generation and answers 200 only once the
// scheduler sends anything back, checking once a second, and 503 after
// SGLANG_HEALTH_CHECK_TIMEOUT (20 s) (http_server.health_generate,
// sgl-project/sglang@0025436eab0556737d615b36a4dd3e1e26e82f3d). So it
// never answers within a 1 s probe, and a scheduler paused for a weight
// swap (pause_generation) never answers it at all: the replica would flap
// unhealthy at every swap. /get_model_info is answered by the HTTP server
// from the tokenizer manager's state without the scheduler (SGLang's own
// launcher polls it to tell that the server is up, _wait_and_warmup in
// the same file). The price: an SGLang whose scheduler hangs stays
// healthy to this probe; the router's passive checks (failed proxied
// requests) still mark it down. vLLM and the built-in engine answer
// /health at once and never reach the second route.
//
// err is the transport error when no route answered (the caller tells its
// own resource errors from the engine's); nil when an engine answered.
func ProbeHealth(ctx context.Context, rt http.RoundTripper, baseURL string) (healthy bool, err error) {
	hctx := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		hctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)/2))
		defer cancel()
	}
	ok, err := probeGet(hctx, rt, baseURL+"/health", nil)
	if ok {
		return true, nil
	}
	if ctx.Err() != nil {
		return false, err
	}
	ok, err2 := probeGet(ctx, rt, baseURL+"/get_model_info", isSGLangModelInfo)
	if ok {
		return true, nil
	}
	if err == nil {
		return false, nil // /health answered, and not 200: that is the verdict
	}
	// /health did not answer (timed out, refused) and nothing proved an
	// SGLang up: report why /health failed, so the caller can tell its own
	// overload (an in-process replica's timeout, no sockets) from the
	// engine's — a vLLM or built-in engine answers the fallback 404 at
	// once, which says nothing about its /health.
	return false, errors.Join(err, err2)
}

// isSGLangModelInfo: the body is SGLang's /get_model_info object (it has
// model_path and is_generation).
func isSGLangModelInfo(body []byte) bool {
	var v struct {
		ModelPath    *string `json:"model_path"`
		IsGeneration *bool   `json:"is_generation"`
	}
	return json.Unmarshal(body, &v) == nil && v.ModelPath != nil && v.IsGeneration != nil
}

// probeGet GETs url: ok on a 200 whose body passes check (nil: any body);
// err is the transport error, nil when the engine answered.
func probeGet(ctx context.Context, rt http.RoundTripper, url string, check func([]byte) bool) (ok bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode == http.StatusOK && (check == nil || check(body)), nil
}
