package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/asyncrl/asyncrl/tinker"
	"github.com/asyncrl/asyncrl/tinker/wire"
)

// The tinker SDK's protobuf side (≥ 0.25, tinker/wire): forward_backward
// bodies as application/x-protobuf, sample and forward/forward_backward
// results read by the answer's Content-Type (lib/api_future_impl.py).

// AcceptProtobuf is SDK 0.25.0's Accept on retrieve_future for a sample,
// forward or forward_backward result; AcceptProtobufOrJSON is 0.18.1 …
// 0.24.1's.
const (
	AcceptProtobuf       = wire.ContentType
	AcceptProtobufOrJSON = wire.ContentType + ", application/json"
)

// Answer is one HTTP answer as received.
type Answer struct {
	Code        int
	ContentType string
	Body        []byte
}

// Protobuf reports whether the answer is protobuf, as the SDK decides it
// (the Content-Type contains application/x-protobuf).
func (a Answer) Protobuf() bool { return strings.Contains(a.ContentType, wire.ContentType) }

// Raw posts body to path with the given headers (name, value pairs) and
// returns the answer, whatever its status.
func (c *Client) Raw(ctx context.Context, path string, body []byte, headers ...string) (Answer, error) {
	if body == nil {
		body = []byte{}
	}
	return c.send(ctx, "POST", path, body, headers...)
}

// send is one exchange with the server: body (nil: none; otherwise JSON
// unless headers say another Content-Type), the headers (name, value
// pairs) and the API key; the answer whatever its status.
func (c *Client) send(ctx context.Context, method, path string, body []byte, headers ...string) (Answer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+"/api/v1/"+path, rd)
	if err != nil {
		return Answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if c.APIKey != "" {
		req.Header.Set("X-API-Key", c.APIKey)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Answer{Code: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: b}, err
}

// PollAccept is one retrieve_future call with an Accept header: done
// false on try_again, a failed future a *FutureError, otherwise the
// answer (protobuf or JSON, by its Content-Type).
func (c *Client) PollAccept(ctx context.Context, id, accept string) (Answer, bool, error) {
	body, _ := json.Marshal(tinker.RetrieveFutureRequest{RequestID: id})
	a, err := c.Raw(ctx, "retrieve_future", body, "Accept", accept)
	if err != nil {
		return a, false, err
	}
	if a.Code != http.StatusOK {
		return a, false, &APIError{Code: a.Code, Body: string(a.Body)}
	}
	if a.Protobuf() {
		return a, true, nil
	}
	var probe struct {
		Type     string  `json:"type"`
		Error    *string `json:"error"`
		Category string  `json:"category"`
	}
	_ = json.Unmarshal(a.Body, &probe)
	switch {
	case probe.Type == "try_again":
		return a, false, nil
	case probe.Error != nil:
		return a, true, &FutureError{tinker.RequestFailedResponse{Error: *probe.Error, Category: probe.Category}}
	}
	return a, true, nil
}

// WaitAccept polls id with accept until it finishes.
func (c *Client) WaitAccept(ctx context.Context, id, accept string) (Answer, error) {
	for {
		a, done, err := c.PollAccept(ctx, id, accept)
		if err != nil || done {
			return a, err
		}
		if err := ctx.Err(); err != nil {
			return a, err
		}
	}
}

// ErrJSONResult is SDK 0.25.0's refusal of a sample or forward_backward
// result answered as JSON.
var ErrJSONResult = errors.New("tinker: the server returned a JSON payload for a result this SDK version reads only as protobuf")

// ReadSample decodes a sample result as an SDK with accept reads it.
func ReadSample(a Answer, accept string) (tinker.SampleResponse, error) {
	if a.Protobuf() {
		return wire.DecodeSampleResponse(a.Body)
	}
	if accept == AcceptProtobuf {
		return tinker.SampleResponse{}, ErrJSONResult
	}
	var out tinker.SampleResponse
	err := json.Unmarshal(a.Body, &out)
	return out, err
}

// ReadForwardBackward decodes a forward or forward_backward result as an
// SDK with accept reads it.
func ReadForwardBackward(a Answer, accept string) (tinker.ForwardBackwardOutput, error) {
	if a.Protobuf() {
		return wire.DecodeForwardBackwardOutput(a.Body)
	}
	if accept == AcceptProtobuf {
		return tinker.ForwardBackwardOutput{}, ErrJSONResult
	}
	var out tinker.ForwardBackwardOutput
	err := json.Unmarshal(a.Body, &out)
	return out, err
}

// SubmitProtobuf posts a forward_backward body as application/x-protobuf
// (zstd-compressed bodies: pass "Content-Encoding", "zstd") and returns the
// future's id.
func (c *Client) SubmitProtobuf(ctx context.Context, body []byte, headers ...string) (string, error) {
	a, err := c.Raw(ctx, "forward_backward", body, append([]string{"Content-Type", wire.ContentType}, headers...)...)
	if err != nil {
		return "", err
	}
	if a.Code != http.StatusOK {
		return "", &APIError{Code: a.Code, Body: string(a.Body)}
	}
	var f tinker.UntypedAPIFuture
	if err := json.Unmarshal(a.Body, &f); err != nil || f.RequestID == "" {
		return "", fmt.Errorf("tinker: forward_backward answered %q", a.Body)
	}
	return f.RequestID, nil
}

// ForwardBackwardProtobuf is TrainingClient.forward_backward (forwardOnly
// false) or .forward (true) as SDK 0.25.0 sends and reads them.
func (c *Client) ForwardBackwardProtobuf(ctx context.Context, model string, seq int64, in tinker.ForwardBackwardInput, forwardOnly bool) (tinker.ForwardBackwardOutput, error) {
	body, err := wire.EncodeForwardBackward(tinker.ForwardBackwardRequest{ModelID: model, SeqID: &seq, ForwardBackwardInput: &in}, forwardOnly)
	if err != nil {
		return tinker.ForwardBackwardOutput{}, err
	}
	id, err := c.SubmitProtobuf(ctx, body)
	if err != nil {
		return tinker.ForwardBackwardOutput{}, err
	}
	a, err := c.WaitAccept(ctx, id, AcceptProtobuf)
	if err != nil {
		return tinker.ForwardBackwardOutput{}, err
	}
	return ReadForwardBackward(a, AcceptProtobuf)
}
