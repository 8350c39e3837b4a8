package chatenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// PostJSON sends one JSON request (in encoded when non-nil; GET when
// method says so) and decodes a 2xx answer into out (when non-nil). Every
// failure wraps ErrEnv, and ErrTimeout when ctx's deadline passed, naming
// the URL; a non-2xx answer carries the server's {"error"} or body. It is
// shared by this package's Client and the OpenEnv client.
func PostJSON(ctx context.Context, hc *http.Client, method, url string, maxBytes int64, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%w: encode %s: %w", ErrEnv, url, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrEnv, method, url, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: %s %s: %w", ErrTimeout, method, url, err)
		}
		return fmt.Errorf("%w: %s %s: %w", ErrEnv, method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w: %s %s: %w", ErrTimeout, method, url, err)
		}
		return fmt.Errorf("%w: %s %s: read body: %w", ErrEnv, method, url, err)
	}
	if int64(len(data)) > maxBytes {
		return fmt.Errorf("%w: %s %s: answer over %d bytes", ErrEnv, method, url, maxBytes)
	}
	if resp.StatusCode/100 != 2 {
		var er struct {
			Error  string `json:"error"`
			Detail any    `json:"detail"` // FastAPI's HTTPException (OpenEnv)
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &er) == nil && er.Error != "" {
			msg = er.Error
		} else if er.Detail != nil {
			msg = fmt.Sprint(er.Detail)
		}
		return fmt.Errorf("%w: %s %s: %d: %s", ErrEnv, method, url, resp.StatusCode, msg)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%w: %s %s: the answer is not this protocol's: %w", ErrEnv, method, url, err)
	}
	return nil
}
