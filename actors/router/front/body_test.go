package front

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// ReadBody must return exactly the body whatever Content-Length claims
// (a wrong or absent length only changes how the buffer grows).
func TestReadBody(t *testing.T) {
	body := strings.Repeat("0123456789", 1000)
	for _, declared := range []int64{-1, 0, 1, 100, int64(len(body)), int64(len(body)) + 5, 1 << 20} {
		got, err := ReadBody(strings.NewReader(body), declared, 1<<20)
		if err != nil || string(got) != body {
			t.Errorf("declared %d: %d bytes, err %v", declared, len(got), err)
		}
	}
	// The limit's error comes through (MaxBytesReader in the handler).
	_, err := ReadBody(http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(body)), 100), int64(len(body)), 100)
	var tooBig *http.MaxBytesError
	if !errors.As(err, &tooBig) {
		t.Errorf("over the limit: err %v, want *http.MaxBytesError", err)
	}
}
