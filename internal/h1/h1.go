// Package h1 holds the pure HTTP/1.1 wire pieces of the router's fast
// front end (actors/router/front, conn.go): a request-head parser that
// accepts only the plain, unambiguous requests the fast path serves and
// says "hand off" for everything else (net/http then answers them,
// including its 400s and 431s), and the bytes of a response head and of
// chunked framing. It does no I/O and keeps no state: the caller owns the
// buffers, so a connection reuses one Head for all its requests.
package h1

import "bytes"

// Header is one header field of a parsed head; Name and Value alias the
// parsed buffer. Hop is set for hop-by-hop fields (RFC 9110 §7.6.1) and
// for those a Connection header names: a proxy never forwards them.
type Header struct {
	Name, Value []byte
	Hop         bool
}

// Head is a parsed request head. Its slices alias the buffer given to
// Parse, valid while that buffer is.
type Head struct {
	Method, Target []byte
	Headers        []Header
	// ContentLength is the declared body length; 0 when absent (an
	// HTTP/1.1 request without Content-Length or Transfer-Encoding has no body).
	ContentLength int64
	// Close is set when the client sent Connection: close.
	Close bool
	cnt   counts // Parse's tally, kept here: a local passed to field escaped (one allocation per head)
}

// Verdict is what Parse made of a buffer.
type Verdict int

// Verdicts.
const (
	// Incomplete: the buffer holds no complete head yet; read more (or,
	// when the buffer is full, hand off: net/http answers 431 or reads on).
	Incomplete Verdict = iota
	// OK: a plain request head the fast path serves.
	OK
	// HandOff: anything else, valid or not; net/http serves or rejects it.
	HandOff
)

// MaxHeaders is the most header fields Parse accepts (more: HandOff).
const MaxHeaders = 64

// Parse parses the request head at the start of buf into h (its Headers
// slice is reused) and returns the head's length including the blank
// line. It accepts only: GET or POST; an origin-form target of plain
// characters (percent-escapes only in the query) whose path is clean
// (no //, /./ or /../: net/http's ServeMux would redirect those);
// HTTP/1.1; CRLF line ends; token field names; values of visible ASCII,
// spaces, tabs and obs-text; exactly one valid Host; at most one
// Content-Length of digits; no Transfer-Encoding, Expect or Upgrade; no
// line folding. Everything else is HandOff.
func Parse(buf []byte, h *Head) (int, Verdict) {
	end := bytes.Index(buf, crlfcrlf)
	if end < 0 {
		if bytes.Contains(buf, lflf) || (len(buf) > 0 && (buf[0] == '\r' || buf[0] == '\n')) {
			return 0, HandOff // bare LF line ends or leading blank lines
		}
		return 0, Incomplete
	}
	n := end + 4
	head := buf[:end+2] // every line with its CRLF
	h.Method, h.Target, h.Headers, h.ContentLength, h.Close, h.cnt = nil, nil, h.Headers[:0], 0, false, counts{}

	line, rest, ok := cutLine(head)
	if !ok || !parseRequestLine(line, h) {
		return n, HandOff
	}
	ok = parseFields(rest, &h.Headers, h.field)
	if c := h.cnt; !ok || c.hosts != 1 || c.lengths > 1 {
		return n, HandOff
	}
	if h.cnt.conn {
		markNamed(h.Headers)
	}
	return n, OK
}

// parseFields parses the header lines of a head (each with its CRLF)
// into hs, checking each with field (the request's or the answer's
// rules); false: a line to hand off.
func parseFields(rest []byte, hs *[]Header, field func(name, value []byte) bool) bool {
	for len(rest) > 0 {
		var line []byte
		var ok bool
		line, rest, ok = cutLine(rest)
		if !ok || len(*hs) == MaxHeaders {
			return false
		}
		name, value, ok := splitField(line)
		if !ok || !field(name, value) {
			return false
		}
		*hs = append(*hs, Header{Name: name, Value: value, Hop: isHop(name)})
	}
	return true
}

// counts are the fields Parse counts across a head.
type counts struct {
	hosts, lengths int
	conn           bool
}

// field checks one header field for the framing and routing rules; false
// means hand off.
func (h *Head) field(name, value []byte) bool {
	switch {
	case equalFold(name, "host"):
		h.cnt.hosts++
		return validHost(value)
	case equalFold(name, "expect"):
		return false
	}
	return h.cnt.framing(name, value, &h.ContentLength, &h.Close)
}

// framing applies the rules a request head and an answer's share:
// Content-Length is counted and parsed into length, Connection is noted
// and its close token sets closed, Transfer-Encoding and Upgrade hand off
// (false); any other field passes.
func (c *counts) framing(name, value []byte, length *int64, closed *bool) bool {
	var ok bool
	switch {
	case equalFold(name, "content-length"):
		c.lengths++
		*length, ok = parseLength(value)
		return ok
	case equalFold(name, "transfer-encoding"), equalFold(name, "upgrade"):
		return false
	case equalFold(name, "connection"):
		c.conn = true
		eachToken(value, func(t []byte) {
			if equalFold(t, "close") {
				*closed = true
			}
		})
	}
	return true
}

var (
	crlfcrlf = []byte("\r\n\r\n")
	lflf     = []byte("\n\n")
)

// cutLine splits off the first CRLF-terminated line; a bare CR or LF
// inside it fails.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	line = b[:i-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, nil, false
	}
	return line, b[i+1:], true
}

func parseRequestLine(line []byte, h *Head) bool {
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 {
		return false
	}
	method, rest := line[:sp], line[sp+1:]
	if string(method) != "GET" && string(method) != "POST" {
		return false
	}
	sp = bytes.IndexByte(rest, ' ')
	if sp < 0 {
		return false
	}
	target, version := rest[:sp], rest[sp+1:]
	if string(version) != "HTTP/1.1" || !validTarget(target) {
		return false
	}
	h.Method, h.Target = method, target
	return true
}

// validTarget accepts an origin-form target of unreserved, sub-delim, ':'
// '@' '/' '?' characters, '%' only in the query, with a clean path.
func validTarget(t []byte) bool {
	if len(t) == 0 || t[0] != '/' {
		return false
	}
	path := t
	if q := bytes.IndexByte(t, '?'); q >= 0 {
		path = t[:q]
	}
	for i, c := range t {
		if !targetByte[c] && (c != '%' || i < len(path)) {
			return false
		}
	}
	return cleanPath(path)
}

// cleanPath reports whether path.Clean would leave path as it is, apart
// from a trailing slash (what ServeMux redirects otherwise).
func cleanPath(p []byte) bool {
	for i := 0; i < len(p); {
		j := bytes.IndexByte(p[i+1:], '/')
		seg := p[i+1:]
		if j >= 0 {
			seg = p[i+1 : i+1+j]
		}
		last := j < 0
		switch {
		case len(seg) == 0 && !last: // "//"
			return false
		case string(seg) == "." || string(seg) == "..":
			return false
		}
		if last {
			break
		}
		i += 1 + j
	}
	return true
}

// splitField splits "name: value" with a token name and trims the value's
// optional whitespace.
func splitField(line []byte) (name, value []byte, ok bool) {
	colon := bytes.IndexByte(line, ':')
	if colon < 1 {
		return nil, nil, false
	}
	name, value = line[:colon], line[colon+1:]
	for _, c := range name {
		if !tokenByte[c] {
			return nil, nil, false
		}
	}
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, nil, false
		}
	}
	return name, trimOWS(value), true
}

func trimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// validHost accepts a non-empty reg-name, IPv4 or bracketed IPv6 with an
// optional port: letters, digits, '-', '.', '_', ':', '[' and ']'.
func validHost(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	return true
}

// hopNames are the hop-by-hop fields, lower-case.
var hopNames = []string{"connection", "proxy-connection", "keep-alive", "proxy-authenticate",
	"proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"}

func isHop(name []byte) bool {
	for _, h := range hopNames {
		if equalFold(name, h) {
			return true
		}
	}
	return false
}

// markNamed sets Hop on every field a Connection header names.
func markNamed(hs []Header) {
	for _, c := range hs {
		if !equalFold(c.Name, "connection") {
			continue
		}
		eachToken(c.Value, func(t []byte) {
			for i := range hs {
				if bytes.EqualFold(hs[i].Name, t) {
					hs[i].Hop = true
				}
			}
		})
	}
}

// eachToken calls f with each non-empty, trimmed element of a
// comma-separated list.
func eachToken(v []byte, f func([]byte)) {
	for len(v) > 0 {
		var t []byte
		t, v, _ = bytes.Cut(v, []byte{','})
		if t = trimOWS(t); len(t) > 0 {
			f(t)
		}
	}
}

// equalFold reports whether b equals the lower-case ASCII lower, ignoring case.
func equalFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// Get returns the value of the first header named name (any case), and
// whether there is one.
func (h *Head) Get(name string) ([]byte, bool) { return get(h.Headers, name) }

// get finds the first header named name (any case) in hs.
func get(hs []Header, name string) ([]byte, bool) {
	for i := range hs {
		if len(hs[i].Name) == len(name) && bytes.EqualFold(hs[i].Name, []byte(name)) {
			return hs[i].Value, true
		}
	}
	return nil, false
}

var tokenByte, targetByte [256]bool

func init() {
	for c := 0; c < 256; c++ {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		tokenByte[c] = alnum || bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), byte(c)) >= 0
		targetByte[c] = alnum || bytes.IndexByte([]byte("-._~!$&'()*+,;=:@/?"), byte(c)) >= 0
	}
}

// RespHead is a parsed response head (Headers alias the parsed buffer).
type RespHead struct {
	Code    int
	Headers []Header
	// ContentLength is the declared body length (-1: none declared).
	ContentLength int64
	// Close is set when the replica sent Connection: close.
	Close bool
	cnt   counts
}

// ParseResponse parses the response head at the start of buf into h and
// returns its length. It accepts only a plain final answer: HTTP/1.1, a
// status of 200–599 other than 204 and 304, exactly one Content-Length,
// no Transfer-Encoding, CRLF lines with token names and clean values.
// HandOff means: read it with net/http (interim and bodiless answers,
// chunked or close-delimited bodies, anything odd).
func ParseResponse(buf []byte, h *RespHead) (int, Verdict) {
	end := bytes.Index(buf, crlfcrlf)
	if end < 0 {
		if bytes.Contains(buf, lflf) {
			return 0, HandOff
		}
		return 0, Incomplete
	}
	n := end + 4
	h.Code, h.Headers, h.ContentLength, h.Close, h.cnt = 0, h.Headers[:0], -1, false, counts{}
	line, rest, ok := cutLine(buf[:end+2])
	if !ok {
		return n, HandOff
	}
	if h.Code, ok = parseStatus(line); !ok {
		return n, HandOff
	}
	ok = parseFields(rest, &h.Headers, h.field)
	if !ok || h.cnt.lengths != 1 {
		return n, HandOff
	}
	if h.cnt.conn {
		markNamed(h.Headers)
	}
	return n, OK
}

// parseStatus reads the code of an HTTP/1.1 status line; only final
// answers with a body (200–599 but 204 and 304) pass.
func parseStatus(line []byte) (int, bool) {
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return 0, false
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return 0, false
		}
		code = code*10 + int(c-'0')
	}
	return code, code >= 200 && code <= 599 && code != 204 && code != 304
}

// field is Head.field for an answer: the shared framing rules only.
func (h *RespHead) field(name, value []byte) bool {
	return h.cnt.framing(name, value, &h.ContentLength, &h.Close)
}

// Get returns the value of the first header named name (any case).
func (h *RespHead) Get(name string) ([]byte, bool) { return get(h.Headers, name) }
