package inproc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// noNet fails the test if a request reaches the network.
type noNet struct{ t *testing.T }

func (n noNet) RoundTrip(r *http.Request) (*http.Response, error) {
	n.t.Errorf("request to %s went to the base transport", r.URL)
	return nil, errors.New("no network in this test")
}

func newTransport(t *testing.T, host string, h http.Handler) *Transport {
	t.Helper()
	reg := &Registry{}
	t.Cleanup(reg.Register("http://"+host, h))
	return &Transport{Registry: reg, Base: noNet{t}}
}

func TestServesARegisteredHandlerAsAServerWould(t *testing.T) {
	var got *http.Request
	var gotBody string
	tr := newTransport(t, "engine-0:8000", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		w.Header().Set("X-Answer", "yes")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	c := &http.Client{Transport: tr}
	req, _ := http.NewRequest(http.MethodPost, "http://engine-0:8000/v1/completions?x=1", strings.NewReader(`{"prompt":[1,2]}`))
	req.Header.Set("X-Session-ID", "s1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || string(body) != `{"ok":true}` || resp.Header.Get("X-Answer") != "yes" {
		t.Fatalf("response %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if resp.ContentLength != int64(len(body)) {
		t.Errorf("ContentLength %d, want %d (the handler had finished)", resp.ContentLength, len(body))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q: want the sniffed text/plain", ct)
	}
	if got.RequestURI != "/v1/completions?x=1" || got.URL.Host != "" || got.URL.Path != "/v1/completions" ||
		got.Host != "engine-0:8000" || got.RemoteAddr == "" || got.Header.Get("X-Session-ID") != "s1" ||
		gotBody != `{"prompt":[1,2]}` || got.ContentLength != int64(len(gotBody)) {
		t.Errorf("server-side request: uri %q url %v host %q remote %q hdr %v body %q len %d",
			got.RequestURI, got.URL, got.Host, got.RemoteAddr, got.Header, gotBody, got.ContentLength)
	}
	if s := tr.Stats(); s.Served != 1 || s.Passed != 0 {
		t.Errorf("stats %+v, want 1 served in process", s)
	}
}

func TestUnregisteredAddressesGoToBase(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "net") }))
	defer srv.Close()
	reg := &Registry{}
	unreg := reg.Register("http://other:1", http.NotFoundHandler())
	tr := &Transport{Registry: reg, Base: http.DefaultTransport}
	c := &http.Client{Transport: tr}
	for _, u := range []string{srv.URL, "http://other:1/x"} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if u == srv.URL && string(b) != "net" {
			t.Errorf("%s: %q", u, b)
		}
		if u != srv.URL && resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want the registered 404", u, resp.StatusCode)
		}
	}
	if s := tr.Stats(); s.Served != 1 || s.Passed != 1 {
		t.Errorf("stats %+v", s)
	}
	// Unregistered (a stopped engine): the network is asked, and refuses.
	unreg()
	if reg.Lookup("other:1") != nil || reg.Len() != 0 {
		t.Fatal("still registered")
	}
	tr.Base = noNet{t: &testing.T{}}
	if _, err := c.Get("http://other:1/x"); err == nil {
		t.Error("an unregistered address was served")
	}
}

func TestReRegistrationSurvivesTheOldUnregister(t *testing.T) {
	reg := &Registry{}
	old := reg.Register("h:1", http.NotFoundHandler())
	reg.Register("http://h:1/", http.RedirectHandler("/x", http.StatusFound))
	old()
	if reg.Lookup("h:1") == nil {
		t.Fatal("unregistering the replaced handler removed the new one")
	}
}

func TestFlushStreamsBeforeTheHandlerReturns(t *testing.T) {
	release := make(chan struct{})
	tr := newTransport(t, "e:1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Trailer", "X-Version-Max")
		_, _ = io.WriteString(w, "data: 1\n\n")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		<-release // the client has the first chunk before the rest exists
		_, _ = io.WriteString(w, "data: 2\n\n")
		w.Header().Set("X-Version-Max", "7")
	}))
	resp, err := (&http.Client{Transport: tr}).Get("http://e:1/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ContentLength != -1 || resp.Header.Get("Trailer") != "" {
		t.Errorf("a streamed response: ContentLength %d, Trailer header %q", resp.ContentLength, resp.Header.Get("Trailer"))
	}
	if _, ok := resp.Trailer["X-Version-Max"]; !ok {
		t.Errorf("declared trailer missing from Response.Trailer: %v", resp.Trailer)
	}
	first := make([]byte, len("data: 1\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "data: 1\n\n" {
		t.Fatalf("first chunk %q %v", first, err)
	}
	close(release)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "data: 2\n\n" {
		t.Fatalf("rest %q %v", rest, err)
	}
	if resp.Trailer.Get("X-Version-Max") != "7" {
		t.Errorf("trailer %v", resp.Trailer)
	}
}

func TestLargeAnswerStreamsWithoutFlush(t *testing.T) {
	release := make(chan struct{})
	chunk := bytes.Repeat([]byte("x"), 100<<10)
	tr := newTransport(t, "e:1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(chunk)
		<-release
		_, _ = w.Write(chunk)
	}))
	resp, err := (&http.Client{Transport: tr}).Get("http://e:1/big")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	close(release) // RoundTrip returned while the handler was blocked
	b, err := io.ReadAll(resp.Body)
	if err != nil || len(b) != 2*len(chunk) {
		t.Fatalf("%d bytes, %v", len(b), err)
	}
}

func TestCancelledClientCancelsTheHandler(t *testing.T) {
	seen := make(chan error, 1)
	started := make(chan struct{})
	tr := newTransport(t, "e:1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		seen <- r.Context().Err()
	}))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://e:1/slow", nil)
	go func() { <-started; cancel() }()
	_, err := tr.RoundTrip(req)
	var na *NotAnsweredError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &na) || !na.InProcess() {
		t.Fatalf("RoundTrip: %v, want a NotAnsweredError wrapping context.Canceled", err)
	}
	if err := <-seen; !errors.Is(err, context.Canceled) {
		t.Errorf("handler saw %v", err)
	}
}

func TestClosingTheBodyCancelsTheHandler(t *testing.T) {
	seen := make(chan error, 1)
	tr := newTransport(t, "e:1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		_, err := w.Write([]byte("late"))
		seen <- err
	}))
	resp, err := tr.RoundTrip(httptest.NewRequest(http.MethodGet, "http://e:1/", nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-seen; err == nil {
		t.Error("a write after the client closed the body succeeded")
	}
}

func TestPanicsEndTheResponseNotTheProcess(t *testing.T) {
	tr := newTransport(t, "e:1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/late" {
			_, _ = io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		panic("boom")
	}))
	if _, err := tr.RoundTrip(httptest.NewRequest(http.MethodGet, "http://e:1/early", nil)); !errors.Is(err, ErrHandlerPanic) {
		t.Errorf("early panic: %v, want ErrHandlerPanic", err)
	}
	resp, err := tr.RoundTrip(httptest.NewRequest(http.MethodGet, "http://e:1/late", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if string(b) != "partial" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("aborted stream: %q %v, want the partial body then io.ErrUnexpectedEOF", b, err)
	}
}

func TestHandlerThatWritesNothingAnswers200(t *testing.T) {
	tr := newTransport(t, "e:1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://e:1/wake_up", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength != 0 {
		t.Errorf("%d, ContentLength %d", resp.StatusCode, resp.ContentLength)
	}
}
