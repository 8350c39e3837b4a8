package chatenv

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// hangServer answers nothing until the test ends.
func hangServer(t *testing.T) string {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	return srv.URL
}
