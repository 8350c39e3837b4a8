package proxy

import (
	"encoding/binary"
	"strconv"
)

// scanBody is the fast path of parseRequest: one pass over the body that
// validates it as JSON (as json.Valid) and, for a top-level object, keeps
// the raw values of the fields the router reads (slices of body, no
// copies) — instead of json.Unmarshal into requestBody, which runs the
// reflective decoder over every byte of a long prompt and copies each
// RawMessage.
//
// It mirrors json.Unmarshal(body, &requestBody{}) exactly or declines:
//
//   - scanInvalid: body is not valid JSON (json.Unmarshal fails too);
//   - scanFallback: a shape where encoding/json's rules are not mirrored
//     here (a top-level value other than an object; a key with an
//     upper-case, non-ASCII or escaped character, which encoding/json may
//     match case-insensitively; an integer field that is not null or a
//     plain integer; nesting deeper than maxScanDepth): the caller
//     decodes with encoding/json;
//   - scanOK: req holds what json.Unmarshal would have stored (the last
//     of duplicate keys wins, null integers are nil), its integers in
//     ints.
//
// FuzzScanBody checks the equivalence against encoding/json.
func scanBody(body []byte, req *requestBody, ints *[3]int) scanResult {
	s := scanner{b: body, exact: true, req: req, ints: ints}
	i := s.ws(0)
	if i >= len(body) || body[i] != '{' {
		return scanFallback // null, an array, a scalar: encoding/json decides
	}
	i = s.object(i, 1, true)
	switch {
	case !s.exact:
		return scanFallback
	case i < 0 || s.ws(i) != len(body):
		return scanInvalid
	}
	return scanOK
}

type scanResult int

const (
	scanOK       scanResult = iota // req holds what json.Unmarshal would store
	scanInvalid                    // not valid JSON: json.Unmarshal fails too
	scanFallback                   // valid or not, decode with encoding/json
)

// maxScanDepth bounds nesting on the fast path (encoding/json allows
// 10,000 levels; deeper bodies take its path and its error).
const maxScanDepth = 512

type scanner struct {
	b     []byte
	exact bool
	req   *requestBody
	ints  *[3]int
}

func (s *scanner) ws(i int) int {
	for i < len(s.b) {
		switch s.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value checks the JSON value at i and returns the index after it, or -1.
func (s *scanner) value(i, depth int) int {
	if i >= len(s.b) {
		return -1
	}
	if depth > maxScanDepth {
		s.exact = false // give up; encoding/json decides
		return -1
	}
	switch c := s.b[i]; {
	case c == '"':
		end, _ := s.str(i)
		return end
	case c == '{':
		return s.object(i, depth, false)
	case c == '[':
		return s.array(i, depth)
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number(i)
	case c == 't':
		return s.lit(i, "true")
	case c == 'f':
		return s.lit(i, "false")
	case c == 'n':
		return s.lit(i, "null")
	}
	return -1
}

func (s *scanner) lit(i int, word string) int {
	if len(s.b)-i < len(word) || string(s.b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

// number checks -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at i.
func (s *scanner) number(i int) int {
	b := s.b
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// str checks the string at i (b[i] == '"') and returns the index after
// its closing quote, and whether it holds an escape. Eight bytes at a
// time, it looks for a quote, a backslash or a control character (< 0x20,
// invalid in a JSON string); bytes ≥ 0x80 pass, as in encoding/json,
// which does not reject invalid UTF-8.
func (s *scanner) str(i int) (int, bool) {
	b := s.b
	i++
	escaped := false
	for {
		for i+8 <= len(b) {
			v := binary.LittleEndian.Uint64(b[i:])
			q := v ^ (lsb * '"')
			bs := v ^ (lsb * '\\')
			// A zero byte in q or bs, or a byte < 0x20 in v, sets its
			// high bit here (the exact "has zero byte" test).
			hit := ((q - lsb) &^ q) | ((bs - lsb) &^ bs) | ((v - lsb*0x20) &^ v)
			if hit&msb != 0 {
				break
			}
			i += 8
		}
		for ; i < len(b); i++ {
			c := b[i]
			if c == '"' || c == '\\' || c < 0x20 {
				break
			}
		}
		if i >= len(b) || b[i] < 0x20 {
			return -1, escaped
		}
		if b[i] == '"' {
			return i + 1, escaped
		}
		escaped = true
		if i = escape(b, i); i < 0 {
			return -1, escaped
		}
	}
}

// escape checks the escape sequence at b[i] == '\\' and returns the index
// after it, or -1.
func escape(b []byte, i int) int {
	i++
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 1
	case 'u':
		if len(b)-i < 5 {
			return -1
		}
		for _, h := range b[i+1 : i+5] {
			if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
				return -1
			}
		}
		return i + 5
	}
	return -1
}

func (s *scanner) array(i, depth int) int {
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == ']' {
		return i + 1
	}
	for {
		if i = s.value(i, depth+1); i < 0 {
			return -1
		}
		var done bool
		if i, done = s.sep(i, ']'); done {
			return i
		}
	}
}

// sep reads what follows a member that ends at i: a comma gives the next
// member's start (done false); close gives the index after it (done
// true); anything else is -1 (done true).
func (s *scanner) sep(i int, close byte) (next int, done bool) {
	i = s.ws(i)
	if i >= len(s.b) {
		return -1, true
	}
	switch s.b[i] {
	case ',':
		return s.ws(i + 1), false
	case close:
		return i + 1, true
	}
	return -1, true
}

// object checks the object at i; the top-level one's members the router
// reads are kept (field).
func (s *scanner) object(i, depth int, top bool) int {
	i = s.ws(i + 1)
	if i < len(s.b) && s.b[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(s.b) || s.b[i] != '"' {
			return -1
		}
		kend, kesc := s.str(i)
		if kend < 0 {
			return -1
		}
		name := s.b[i+1 : kend-1]
		i = s.ws(kend)
		if i >= len(s.b) || s.b[i] != ':' {
			return -1
		}
		i = s.ws(i + 1)
		start := i
		if i = s.value(i, depth+1); i < 0 {
			return -1
		}
		if top {
			if !s.field(name, kesc, s.b[start:i]) {
				return -1 // not mirrored: encoding/json decides
			}
		}
		var done bool
		if i, done = s.sep(i, '}'); done {
			return i
		}
	}
}

// field stores a top-level member the router reads; false (and
// s.exact = false) where encoding/json's rules are not mirrored.
func (s *scanner) field(name []byte, escaped bool, raw []byte) bool {
	if escaped || !plainLower(name) {
		s.exact = false // encoding/json might fold it onto a field
		return false
	}
	r := s.req
	switch string(name) {
	case "prompt":
		r.Prompt = raw
	case "messages":
		r.Messages = raw
	case "session_params":
		r.SessionParams = raw
	case "user":
		r.User = raw
	case "session_id":
		r.SessionID = raw
	case "user_id":
		r.UserID = raw
	case "max_tokens":
		r.MaxTokens = s.intField(raw, 0)
	case "max_completion_tokens":
		r.MaxCompletionTokens = s.intField(raw, 1)
	case "n":
		r.N = s.intField(raw, 2)
	case "input_ids":
		r.InputIDs = raw
	case "sampling_params":
		r.SamplingParams = raw
	}
	return s.exact
}

// intField is an *int field's value: nil for null, else the integer; a
// float, string, bool, object or out-of-range integer is a type error in
// encoding/json, left to it.
func (s *scanner) intField(raw []byte, k int) *int {
	if string(raw) == "null" {
		return nil
	}
	v, err := strconv.Atoi(string(raw))
	if err != nil {
		s.exact = false
		return nil
	}
	s.ints[k] = v
	return &s.ints[k]
}

// plainLower reports whether name is only lower-case ASCII letters,
// digits and punctuation: no byte encoding/json's case folding could
// match to a different letter.
func plainLower(name []byte) bool {
	for _, c := range name {
		if c >= 0x80 || (c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
