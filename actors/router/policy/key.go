package policy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// Key sources, in priority order (vllm-router / SkyRL).
var keyHeaders = []string{"X-Session-Id", "X-User-Id", "X-Tenant-Id", "X-Correlation-Id", "X-Request-Id", "X-Trace-Id"}

// Source names where a Key came from.
const (
	SourceNone = ""
	SourceBody = "body" // the body text itself (hash-only)
)

// maxBodyKey is the longest body text used verbatim as a key; longer
// bodies are replaced by their hash so keys stay small.
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

// ExtractSessionKey returns the first non-empty key among: headers
// x-session-id, x-user-id, x-tenant-id, x-correlation-id, x-request-id,
// x-trace-id; body fields session_params.session_id, user, session_id,
// user_id; then the body text (as "body:<FNV-1a hex>" when longer than 100
// characters). Malformed or non-object JSON skips the body fields and
// falls through to the body text. String and number field values count.
func ExtractSessionKey(h http.Header, body []byte) Key {
	if k, ok := HeaderSessionKey(h); ok {
		return k
	}
	var f BodyKeyFields
	if len(body) == 0 || json.Unmarshal(body, &f) != nil {
		return SessionKeyFrom(nil, body, nil)
	}
	return SessionKeyFrom(nil, body, &f)
}

// BodyKeyFields are the body fields a session key may come from. A caller
// that decodes the body anyway (the proxy, for token counts) embeds this
// in its own struct and calls SessionKeyFrom, so the body is parsed once.
// Field names match case-insensitively, as encoding/json does.
type BodyKeyFields struct {
	SessionParams json.RawMessage `json:"session_params"`
	User          json.RawMessage `json:"user"`
	SessionID     json.RawMessage `json:"session_id"`
	UserID        json.RawMessage `json:"user_id"`
}

// HeaderSessionKey returns the first non-empty key header, if any.
func HeaderSessionKey(h http.Header) (Key, bool) {
	for _, name := range keyHeaders {
		if v := strings.TrimSpace(h.Get(name)); v != "" {
			return Key{Value: v, Source: strings.ToLower(name)}, true
		}
	}
	return Key{}, false
}

// SessionKeyFrom is ExtractSessionKey for a body already decoded into f;
// f is nil when the body is not a JSON object (then only the body text
// can be the key). h may be nil when the headers were checked already.
func SessionKeyFrom(h http.Header, body []byte, f *BodyKeyFields) Key {
	if h != nil {
		if k, ok := HeaderSessionKey(h); ok {
			return k
		}
	}
	if f != nil {
		if len(f.SessionParams) > 0 {
			var sp struct {
				SessionID json.RawMessage `json:"session_id"`
			}
			if json.Unmarshal(f.SessionParams, &sp) == nil {
				if v := scalar(sp.SessionID); v != "" {
					return Key{Value: v, Source: "session_params.session_id"}
				}
			}
		}
		for _, c := range []struct {
			raw  json.RawMessage
			name string
		}{{f.User, "user"}, {f.SessionID, "session_id"}, {f.UserID, "user_id"}} {
			if v := scalar(c.raw); v != "" {
				return Key{Value: v, Source: c.name}
			}
		}
	}
	text := strings.TrimSpace(string(body))
	if text == "" {
		return Key{}
	}
	if len(text) > maxBodyKey {
		text = "body:" + strconv.FormatUint(Hash64(text), 16)
	}
	return Key{Value: text, Source: SourceBody}
}

// scalar renders a JSON string or number as a key; anything else is "".
func scalar(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strings.TrimSpace(s)
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}
