package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

const plain = "POST /v1/completions?x=%20 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type: application/json\r\n" +
	"X-Session-ID:  s-1 \r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nTe: trailers\r\nContent-Length: 2\r\n\r\n{}"

func TestParsePlain(t *testing.T) {
	var h Head
	n, v := Parse([]byte(plain), &h)
	if v != OK || n != len(plain)-2 {
		t.Fatalf("verdict %v n %d", v, n)
	}
	if string(h.Method) != "POST" || string(h.Target) != "/v1/completions?x=%20" || h.ContentLength != 2 || h.Close {
		t.Fatalf("%s %s %d %v", h.Method, h.Target, h.ContentLength, h.Close)
	}
	if v, ok := h.Get("x-session-id"); !ok || string(v) != "s-1" {
		t.Fatalf("x-session-id %q %v", v, ok)
	}
	hop := map[string]bool{}
	for _, f := range h.Headers {
		hop[string(f.Name)] = f.Hop
	}
	want := map[string]bool{"Host": false, "Content-Type": false, "X-Session-ID": false, "Connection": true,
		"X-Hop": true, "Te": true, "Content-Length": false}
	for k, w := range want {
		if hop[k] != w {
			t.Errorf("%s: hop %v, want %v", k, hop[k], w)
		}
	}
	// The same connection's next head reuses the slice.
	if _, v := Parse([]byte("GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"), &h); v != OK || !h.Close || len(h.Headers) != 2 {
		t.Fatalf("second head: %v close %v %d headers", v, h.Close, len(h.Headers))
	}
}

// Every request the fast path does not serve is handed to net/http (which
// serves it or writes its 400/431), never half-parsed.
func TestParseHandOff(t *testing.T) {
	const host = "Host: h\r\n"
	for name, head := range map[string]string{
		"chunked":        "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n",
		"expect":         "POST / HTTP/1.1\r\n" + host + "Expect: 100-continue\r\nContent-Length: 1\r\n\r\n",
		"upgrade":        "GET / HTTP/1.1\r\n" + host + "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"http/1.0":       "GET / HTTP/1.0\r\n" + host + "\r\n",
		"http/2 preface": "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"no host":        "GET / HTTP/1.1\r\n\r\n",
		"two hosts":      "GET / HTTP/1.1\r\n" + host + host + "\r\n",
		"empty host":     "GET / HTTP/1.1\r\nHost:\r\n\r\n",
		"bad host":       "GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
		"two lengths":    "POST / HTTP/1.1\r\n" + host + "Content-Length: 1\r\nContent-Length: 1\r\n\r\n",
		"signed length":  "POST / HTTP/1.1\r\n" + host + "Content-Length: +1\r\n\r\n",
		"put":            "PUT / HTTP/1.1\r\n" + host + "\r\n",
		"head":           "HEAD / HTTP/1.1\r\n" + host + "\r\n",
		"absolute form":  "GET http://h/ HTTP/1.1\r\n" + host + "\r\n",
		"double slash":   "GET //x HTTP/1.1\r\n" + host + "\r\n",
		"dot segment":    "GET /a/./b HTTP/1.1\r\n" + host + "\r\n",
		"dotdot":         "GET /a/.. HTTP/1.1\r\n" + host + "\r\n",
		"escaped path":   "GET /%61dmin/ HTTP/1.1\r\n" + host + "\r\n",
		"fragment":       "GET /a#b HTTP/1.1\r\n" + host + "\r\n",
		"folded":         "GET / HTTP/1.1\r\n" + host + "X-A: 1\r\n 2\r\n\r\n",
		"space in name":  "GET / HTTP/1.1\r\n" + host + "X-A : 1\r\n\r\n",
		"ctl in value":   "GET / HTTP/1.1\r\n" + host + "X-A: 1\x012\r\n\r\n",
		"bare lf":        "GET / HTTP/1.1\n" + host + "\n",
		"bare cr":        "GET / HTTP/1.1\r\n" + "X-A: a\rb\r\n" + host + "\r\n",
		"leading crlf":   "\r\nGET / HTTP/1.1\r\n" + host + "\r\n",
		"garbage":        "HELLO\r\n\r\n",
		"extra space":    "GET  / HTTP/1.1\r\n" + host + "\r\n",
		"too many":       "GET / HTTP/1.1\r\n" + host + strings.Repeat("X-A: 1\r\n", MaxHeaders) + "\r\n",
	} {
		var h Head
		if _, v := Parse([]byte(head), &h); v != HandOff {
			t.Errorf("%s: verdict %v, want HandOff", name, v)
		}
	}
	var h Head
	if _, v := Parse([]byte("POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Len"), &h); v != Incomplete {
		t.Fatalf("partial head: %v", v)
	}
}

// FuzzParse holds Parse to net/http: every head it accepts, http.ReadRequest
// accepts too, with the same method, target, headers, body length and
// Connection: close.
func FuzzParse(f *testing.F) {
	f.Add([]byte(plain))
	f.Add([]byte("GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"))
	f.Add([]byte("POST /v1/chat/completions HTTP/1.1\r\nhost: [::1]:80\r\ncontent-length: 0\r\nx-a: \t\xff v\t\r\n\r\n"))
	f.Add([]byte("GET /a?b=%zz&c=/../ HTTP/1.1\r\nHost: a\r\nX: 1\r\nx: 2\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Head
		n, v := Parse(b, &h)
		if v != OK {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b[:n])))
		if err != nil {
			t.Fatalf("Parse accepted %q, ReadRequest: %v", b[:n], err)
		}
		if req.Method != string(h.Method) || req.RequestURI != string(h.Target) || req.ProtoMinor != 1 {
			t.Fatalf("%q: ReadRequest %s %s %s", b[:n], req.Method, req.RequestURI, req.Proto)
		}
		if req.ContentLength != h.ContentLength || req.Close != h.Close {
			t.Fatalf("%q: length %d/%d close %v/%v", b[:n], req.ContentLength, h.ContentLength, req.Close, h.Close)
		}
		if host, _ := h.Get("host"); req.Host != string(host) {
			t.Fatalf("%q: host %q vs %q", b[:n], req.Host, host)
		}
		got := http.Header{}
		for _, f := range h.Headers {
			k := http.CanonicalHeaderKey(string(f.Name))
			got[k] = append(got[k], string(f.Value))
		}
		delete(got, "Host") // ReadRequest moves it to req.Host (checked above)
		for k, vs := range req.Header {
			if strings.Join(vs, "\x00") != strings.Join(got[k], "\x00") {
				t.Fatalf("%q: header %s = %q, Parse %q", b[:n], k, vs, got[k])
			}
		}
		for k := range got {
			if _, ok := req.Header[k]; !ok {
				t.Fatalf("%q: Parse has header %s, ReadRequest not", b[:n], k)
			}
		}
	})
}

func TestWrite(t *testing.T) {
	b := AppendStatusLine(nil, 200, "OK")
	b = AppendHeader(b, "X-A", "1\r\nX-Injected: 2")
	b = AppendChunkSize(b, 255)
	if got := string(b); got != "HTTP/1.1 200 OK\r\nX-A: 1  X-Injected: 2\r\nff\r\n" {
		t.Fatalf("%q", got)
	}
	if !Bodiless(204) || !Bodiless(304) || !Bodiless(101) || Bodiless(200) {
		t.Fatal("Bodiless")
	}
}

func TestParseResponse(t *testing.T) {
	var h RespHead
	ok := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close, X-A\r\nX-A: 1\r\nContent-Length: 2\r\n\r\n{}"
	n, v := ParseResponse([]byte(ok), &h)
	if v != OK || n != len(ok)-2 || h.Code != 200 || h.ContentLength != 2 || !h.Close || len(h.Headers) != 4 || !h.Headers[2].Hop {
		t.Fatalf("%v %d %+v", v, n, h)
	}
	if ct, _ := h.Get("content-type"); string(ct) != "application/json" {
		t.Fatalf("content-type %q", ct)
	}
	for name, head := range map[string]string{
		"interim":    "HTTP/1.1 100 Continue\r\n\r\n",
		"no content": "HTTP/1.1 204 No Content\r\n\r\n",
		"chunked":    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
		"no length":  "HTTP/1.1 200 OK\r\n\r\n",
		"two":        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
		"http/1.0":   "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n",
		"bad code":   "HTTP/1.1 2x0 OK\r\nContent-Length: 1\r\n\r\n",
		"folded":     "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nX: a\r\n b\r\n\r\n",
	} {
		if _, v := ParseResponse([]byte(head), &h); v != HandOff {
			t.Errorf("%s: %v, want HandOff", name, v)
		}
	}
}

// FuzzParseResponse holds ParseResponse to http.ReadResponse on what it accepts.
func FuzzParseResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"))
	f.Add([]byte("HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\nX: \t1 \r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h RespHead
		n, v := ParseResponse(b, &h)
		if v != OK {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b[:n])), nil)
		if err != nil {
			t.Fatalf("ParseResponse accepted %q, ReadResponse: %v", b[:n], err)
		}
		if resp.StatusCode != h.Code || resp.ContentLength != h.ContentLength || resp.Close != h.Close {
			t.Fatalf("%q: %d %d %v vs %d %d %v", b[:n], resp.StatusCode, resp.ContentLength, resp.Close, h.Code, h.ContentLength, h.Close)
		}
		got := http.Header{}
		for _, f := range h.Headers {
			k := http.CanonicalHeaderKey(string(f.Name))
			got[k] = append(got[k], string(f.Value))
		}
		if h.Close {
			delete(got, "Connection") // ReadResponse drops it once it set Close (hop-by-hop either way)
		}
		for k, vs := range resp.Header {
			if strings.Join(vs, "\x00") != strings.Join(got[k], "\x00") {
				t.Fatalf("%q: header %s = %q, ParseResponse %q", b[:n], k, vs, got[k])
			}
		}
		if len(got) != len(resp.Header) {
			t.Fatalf("%q: %d headers vs %d", b[:n], len(got), len(resp.Header))
		}
	})
}
