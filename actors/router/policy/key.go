package policy

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// KeyHeaders are the request headers a session key may come from, in
// priority order, lower-case (vllm-project/router src/policies/
// hash_key.rs, SESSION_HEADER_NAMES).
var KeyHeaders = []string{"x-session-id", "x-user-id", "x-tenant-id", "x-correlation-id", "x-request-id", "x-trace-id"}

// Source names where a Key came from.
const (
	SourceNone = ""
	SourceBody = "body" // the body text itself (hash-only)
)

// maxBodyKey is the longest body text used verbatim as a key; longer
// bodies are replaced by their hash so keys stay small (vllm-router: >
// 100 bytes).
const maxBodyKey = 100

// Key is a session key and where it came from.
type Key struct {
	Value string
	// Source is the lower-case header name, "session_params.session_id",
	// "user", "session_id", "user_id", SourceBody, or SourceNone.
	Source string
}

// HashOnly reports whether the key is the body-text fallback: fine for
// placing a request on a hash ring, wrong for tracking a session (every
// turn of a conversation has a different body).
func (k Key) HashOnly() bool { return k.Source == SourceBody }

// Found reports whether a key source matched. An empty Value from a body
// field (`"user": ""`) is found — it ends the search, as in vllm-router —
// but routes untracked.
func (k Key) Found() bool { return k.Source != SourceNone }

// SessionKey returns the session key of a request, by vllm-router's rules
// (src/policies/hash_key.rs: extract_hash_key / extract_session_id):
//
//  1. the first non-empty header among KeyHeaders; header(name) returns
//     the value of the header with that lower-case name, "" if absent
//     (the proxy passes http.Header.Get; the core never sees net/http);
//  2. body fields session_params.session_id, user, session_id, user_id —
//     the first one PRESENT wins, with vllm-router's value rules (see
//     FieldValue): an empty string ends the search, null and other
//     non-string values count as their JSON text;
//  3. the body text, as "body:<FNV-1a hex>" when longer than 100 bytes.
//
// header may be nil (no headers).
func SessionKey(header func(name string) string, body []byte) Key {
	if header != nil {
		if k, ok := HeaderKey(header); ok {
			return k
		}
	}
	var f BodyKeyFields
	if len(body) == 0 || json.Unmarshal(body, &f) != nil {
		return BodyKey(body, nil)
	}
	return BodyKey(body, &f)
}

// HeaderKey returns the first non-empty key header, if any. Values are
// used as they are (vllm-router does not trim; net/http already strips
// the optional whitespace around a header value).
func HeaderKey(header func(name string) string) (Key, bool) {
	for _, name := range KeyHeaders {
		if v := header(name); v != "" {
			return Key{Value: v, Source: name}, true
		}
	}
	return Key{}, false
}

// BodyKeyFields are the body fields a session key may come from. A caller
// that decodes the body anyway (the proxy, for token counts) embeds this
// in its own struct and calls BodyKey, so the body is parsed once. Field
// names match case-insensitively, as encoding/json does (vllm-router's
// scan is case-sensitive).
type BodyKeyFields struct {
	SessionParams json.RawMessage `json:"session_params"`
	User          json.RawMessage `json:"user"`
	SessionID     json.RawMessage `json:"session_id"`
	UserID        json.RawMessage `json:"user_id"`
}

// BodyKey is SessionKey after the headers, for a body already decoded
// into f; f is nil when the body is not a JSON object (then only the body
// text can be the key).
func BodyKey(body []byte, f *BodyKeyFields) Key {
	if f != nil {
		if len(f.SessionParams) > 0 && f.SessionParams[0] == '{' {
			var sp struct {
				SessionID json.RawMessage `json:"session_id"`
			}
			if json.Unmarshal(f.SessionParams, &sp) == nil {
				if v, ok := FieldValue(sp.SessionID); ok {
					return Key{Value: v, Source: "session_params.session_id"}
				}
			}
		}
		for _, c := range []struct {
			raw  json.RawMessage
			name string
		}{{f.User, "user"}, {f.SessionID, "session_id"}, {f.UserID, "user_id"}} {
			if v, ok := FieldValue(c.raw); ok {
				return Key{Value: v, Source: c.name}
			}
		}
	}
	if len(body) == 0 {
		return Key{}
	}
	text := string(body)
	if len(text) > maxBodyKey {
		text = "body:" + strconv.FormatUint(Hash64(text), 16)
	}
	return Key{Value: text, Source: SourceBody}
}

// FieldValue renders a body field's raw JSON value as vllm-router's
// extract_field_value reads it from the request text: a string is the
// text between its quotes, escapes not decoded ("" counts: found, empty);
// anything else — a number, true, false, null, an object or array — is
// its text up to the first of , space } ] \n \r \t ("null" for null,
// `{"a":1` for {"a":1}), not found only when that is empty. An absent
// field (nil) is not found.
func FieldValue(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "", false
	}
	if raw[0] == '"' {
		if end := bytes.IndexByte(raw[1:], '"'); end >= 0 {
			return string(raw[1 : 1+end]), true
		}
		return "", false
	}
	end := bytes.IndexAny(raw, ", }]\n\r\t")
	if end < 0 {
		end = len(raw)
	}
	if end == 0 {
		return "", false
	}
	return string(raw[:end]), true
}
