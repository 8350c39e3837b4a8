package netx

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"": true, "127.0.0.1:8000": true, "127.0.0.1": true, "[::1]:80": true, "localhost:1": true, "127.3.4.5:9": true,
		"0.0.0.0:8000": false, ":8000": false, "[::]:1": false, "10.0.0.5:80": false, "example.com:80": false, "10.0.0.5": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestBearerToken(t *testing.T) {
	for h, want := range map[string]string{"Bearer abc": "abc", "bearer abc": "abc", "BEARER a b": "a b"} {
		if got, ok := BearerToken(h); !ok || got != want {
			t.Errorf("BearerToken(%q) = %q, %v", h, got, ok)
		}
	}
	for _, h := range []string{"", "Basic abc", "Bearerabc", "Token abc"} {
		if _, ok := BearerToken(h); ok {
			t.Errorf("BearerToken(%q) accepted", h)
		}
	}
}

func TestTokenEqual(t *testing.T) {
	if !TokenEqual("k1", "k1") || TokenEqual("k1", "k2") || TokenEqual("", "") || TokenEqual("k", "") {
		t.Error("TokenEqual wrong")
	}
}

func TestKeyTransport(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		def   string
		hosts map[string]string
		want  string
	}{{"d", nil, "Bearer d"}, {"d", map[string]string{host: "h"}, "Bearer h"}, {"d", map[string]string{host: ""}, ""}, {"", nil, ""}} {
		got = nil
		cl := &http.Client{Transport: KeyTransport(nil, c.def, c.hosts)}
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("Authorization", "Bearer from-client")
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := c.want
		if want == "" {
			want = "Bearer from-client" // no key: the request is passed as it is
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("%+v: sent %q, want %q", c, got, want)
		}
		cl.CloseIdleConnections()
	}
}

func TestFreePortsAreBelowTheEphemeralRangeAndBind(t *testing.T) {
	lo := ephemeralLow()
	ports, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d returned twice", p)
		}
		seen[p] = true
		if lo-10000 >= 1000 && (p < 10000 || p >= lo) {
			t.Errorf("port %d outside [10000, %d): the kernel may hand it out to a :0 listener", p, lo)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d does not bind: %v", p, err)
			continue
		}
		_ = l.Close()
	}
	// A second call never repeats a port of the first.
	more, err := FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range more {
		if seen[p] {
			t.Errorf("port %d handed out again", p)
		}
	}
}
