package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/wire"
)

// The protobuf side of the API (tinker SDK ≥ 0.25, tinker/wire): the
// forward_backward body the SDK sends as application/x-protobuf, and the
// sample and forward/forward_backward results it reads only as protobuf.
// Both are translated at the edge — a protobuf body into the JSON request
// the handlers take, a stored JSON result into protobuf when the Accept
// header prefers it — so validation, idempotency, training, storage and
// restart recovery stay one path for every SDK version.

// rawProto is an answer already encoded as protobuf.
type rawProto []byte

// decodeBody undoes a Content-Encoding (zstd, which the SDK uses on
// protobuf bodies when client/config asks it to) within limit bytes.
func decodeBody(r *http.Request, body []byte, limit int64) ([]byte, *apiError) {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return body, nil
	case "zstd":
		d, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(limit)+1))
		if err != nil {
			return nil, httpErr(http.StatusBadRequest, "Content-Encoding zstd: %v", err)
		}
		defer d.Close()
		out, err := io.ReadAll(io.LimitReader(d, limit+1))
		if err != nil {
			return nil, httpErr(http.StatusBadRequest, "Content-Encoding zstd: the body does not decompress: %v", err)
		}
		if int64(len(out)) > limit {
			return nil, httpErr(http.StatusRequestEntityTooLarge, "the decompressed body exceeds tinker.max_request_bytes (%d bytes)", limit)
		}
		return out, nil
	default:
		return nil, httpErr(http.StatusUnsupportedMediaType, "Content-Encoding %q is not supported (zstd or none)", enc)
	}
}

// protoRequest turns a protobuf forward_backward body into the JSON body of
// the handler it goes to: forward_backward, or forward when forward_only
// is set (TrainingClient.forward in SDK ≥ 0.25 posts there with it). The
// JSON is canonical (map keys sorted), so a retry whose protobuf map
// entries come in another order is still the same body for idempotency.
func (s *Server) protoRequest(path string, body []byte) (handlerFunc, []byte, *apiError) {
	if path != "forward_backward" {
		return nil, nil, httpErr(http.StatusUnsupportedMediaType,
			"%s takes JSON: only forward_backward takes application/x-protobuf bodies (as the tinker SDK ≥ 0.25 sends them)", path)
	}
	req, forwardOnly, err := wire.DecodeForwardBackward(body)
	if err != nil {
		var fe tinker.FieldErrors
		if errors.As(err, &fe) {
			return nil, nil, &apiError{code: http.StatusUnprocessableEntity, detail: fe}
		}
		return nil, nil, httpErr(http.StatusBadRequest, "forward_backward: %v", err)
	}
	var out any = req
	h := s.forwardBackward
	if forwardOnly {
		out = tinker.ForwardRequest{ModelID: req.ModelID, SeqID: req.SeqID, ForwardInput: req.ForwardBackwardInput}
		h = s.forward
	}
	b, err := json.Marshal(out)
	if err != nil {
		// NaN or ±Inf in a float32 loss input: JSON cannot carry it.
		return nil, nil, &apiError{code: http.StatusUnprocessableEntity, detail: tinker.FieldErrors{{Loc: []any{"body", "data"},
			Type: "value_error", Msg: fmt.Sprintf("loss inputs must be finite: %v", err)}}}
	}
	return h, b, nil
}

// protoResult is a finished future's stored JSON result as the protobuf
// the SDK reads: a SampleResponse or a ForwardBackwardOutput. Anything
// else — try_again, a failure, another route's result — stays JSON, which
// is what every SDK reads those as (api_future_impl.py picks the decoder
// by the answer's Content-Type).
func protoResult(raw []byte) (any, error) {
	var r struct {
		Error            *string                  `json:"error"`
		Type             string                   `json:"type"`
		Sequences        []tinker.SampledSequence `json:"sequences"`
		LossFnOutputType *string                  `json:"loss_fn_output_type"`
		LossFnOutputs    []tinker.LossFnOutput    `json:"loss_fn_outputs"`
		Metrics          map[string]float64       `json:"metrics"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Error != nil || r.Type == "try_again" {
		return rawJSON(raw), nil
	}
	switch {
	case r.Sequences != nil:
		b, err := wire.AppendSampleResponse(nil, tinker.SampleResponse{Sequences: r.Sequences})
		return rawProto(b), err
	case r.LossFnOutputType != nil:
		b, err := wire.AppendForwardBackwardOutput(nil, tinker.ForwardBackwardOutput{LossFnOutputType: *r.LossFnOutputType,
			LossFnOutputs: r.LossFnOutputs, Metrics: r.Metrics})
		return rawProto(b), err
	}
	return rawJSON(raw), nil
}
