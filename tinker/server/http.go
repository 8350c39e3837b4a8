package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/wire"
)

// apiError is an HTTP error answered as FastAPI does: {"detail": ...}.
type apiError struct {
	code   int
	detail any
}

func (e *apiError) Error() string {
	b, _ := json.Marshal(e.detail)
	return strconv.Itoa(e.code) + " " + string(b)
}

func httpErr(code int, format string, a ...any) *apiError {
	return &apiError{code: code, detail: errf(format, a...).Error()}
}

// coreErr maps the core's sentinel errors onto status codes.
func coreErr(err error) *apiError {
	var fe tinker.FieldErrors
	switch {
	case errors.As(err, &fe):
		return &apiError{code: http.StatusUnprocessableEntity, detail: fe}
	case errors.Is(err, tinker.ErrUnknownSession), errors.Is(err, tinker.ErrUnknownModel), errors.Is(err, tinker.ErrUnknownSampler):
		return &apiError{code: http.StatusNotFound, detail: err.Error()}
	case errors.Is(err, tinker.ErrConflict), errors.Is(err, tinker.ErrExists):
		// 400, not 409: the SDK retries 409 for up to 300 s
		// (_is_retryable_status_code in src/tinker/lib/internal_client_holder.py,
		// _should_retry in src/tinker/_base_client.py; tinker 6b025363 and
		// d595dc2b), blocking the training client, and then raises anyway.
		// It raises a 400 at once, with this detail.
		return &apiError{code: http.StatusBadRequest, detail: err.Error()}
	case errors.Is(err, tinker.ErrQuota):
		return &apiError{code: http.StatusTooManyRequests, detail: err.Error()}
	}
	return &apiError{code: http.StatusInternalServerError, detail: err.Error()}
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, body []byte) (any, error)

// route wraps a handler: method, API key, body limit, protobuf bodies and
// answers (proto.go), metrics, and the JSON answer.
func (s *Server) route(mux *http.ServeMux, method, path string, h handlerFunc) {
	name := path
	mux.HandleFunc(method+" /api/v1/"+path, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		code := s.serve(w, r, path, h)
		s.met.requests.WithLabelValues(name, strconv.Itoa(code)).Inc()
		s.met.latency.WithLabelValues(name).Observe(time.Since(start).Seconds())
	})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, path string, h handlerFunc) int {
	if s.cfg.APIKey != "" && path != "healthz" {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("X-API-Key")), []byte(s.cfg.APIKey)) != 1 {
			return writeErr(w, httpErr(http.StatusUnauthorized, "missing or wrong X-API-Key"))
		}
	}
	var body []byte
	if r.Method == http.MethodPost {
		var err error
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.Tinker.MaxRequestBytes))
		if err != nil {
			var mb *http.MaxBytesError
			if errors.As(err, &mb) {
				return writeErr(w, httpErr(http.StatusRequestEntityTooLarge, "request body exceeds tinker.max_request_bytes (%d bytes)", mb.Limit))
			}
			return writeErr(w, httpErr(http.StatusBadRequest, "reading the body: %v", err))
		}
		// protobuf bodies, Content-Encoding: proto.go
		var ae *apiError
		if body, ae = decodeBody(r, body, s.cfg.Tinker.MaxRequestBytes); ae != nil {
			return writeErr(w, ae)
		}
		if wire.IsProtobuf(r.Header.Get("Content-Type")) {
			if h, body, ae = s.protoRequest(path, body); ae != nil {
				return writeErr(w, ae)
			}
		}
	}
	out, err := h(w, r, body)
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = coreErr(err)
		}
		return writeErr(w, ae)
	}
	if raw, ok := out.(rawJSON); ok && path == "retrieve_future" && wire.PrefersProtobuf(r.Header.Get("Accept")) {
		if out, err = protoResult(raw); err != nil {
			b, _ := json.Marshal(failure("the result cannot be encoded as protobuf: "+err.Error(), "server"))
			out = rawJSON(b)
		}
	}
	if raw, ok := out.(rawProto); ok {
		w.Header().Set("Content-Type", wire.ContentType)
		_, _ = w.Write(raw)
		return http.StatusOK
	}
	if raw, ok := out.(rawJSON); ok {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(raw)
		return http.StatusOK
	}
	return writeJSON(w, http.StatusOK, out)
}

// rawJSON is an already-encoded answer (a stored future result): written
// as is, never decoded and re-encoded.
type rawJSON []byte

func writeJSON(w http.ResponseWriter, code int, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"detail":"encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
	return code
}

func writeErr(w http.ResponseWriter, e *apiError) int {
	return writeJSON(w, e.code, map[string]any{"detail": e.detail})
}

// decode parses body into v; a bad body is a 422 naming the field.
func decode(body []byte, v any) error {
	if len(body) == 0 {
		return tinker.FieldErrors{{Loc: []any{"body"}, Msg: "Field required", Type: "missing"}}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return tinker.DecodeError(err)
	}
	return nil
}

func hash(body []byte) [32]byte { return sha256.Sum256(body) }
