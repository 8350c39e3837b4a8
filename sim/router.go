package sim

import (
	"encoding/binary"
	"fmt"

	"github.com/asyncrl/asyncrl/actors/router/policy"
)

// The router shell, closer to the real one (issue 37): the routing table
// changes through the core's typed Changes (policy.Core.Step, as the
// proxy's Router.Apply does), and a turn's request carries what the proxy
// derives from the HTTP request — its session key (policy.SessionKey:
// the X-Session-ID header, or on some seeds a body field, or nothing: an
// untracked request placed by its body text) and its prefix block hashes
// (policy.PrefixBlockHashes over the prompt's bytes).

// Session-key sources a seed may draw (inputs.keySource).
const (
	keyHeader = iota // X-Session-ID
	keyBody          // the body's session_id or user field
	keyNone          // no key: the body text (hash-only, untracked)
)

// prefixBlock is the proxy's prefix block size in bytes (4 tokens here).
const prefixBlock = 16

// change applies one change to the routing table; a refused one (an
// engine the table no longer has) is logged, as the proxy logs it.
func (c *ctlNode) change(ch policy.Change) {
	if err := c.rt.Step(c.t(), ch); err != nil {
		c.w.record(true, "ctl: router: %v (change on %q)", err, ch.Replica())
	}
}

// request is the routing request of trajectory t's next turn.
func (c *ctlNode) request(t *rtraj) policy.Request {
	w := c.w
	body := promptBytes(t.ctx)
	var k policy.Key
	switch w.in.keySource {
	case keyHeader:
		k = policy.SessionKey(func(name string) string {
			if name == "x-session-id" {
				return t.id
			}
			return ""
		}, nil)
	case keyBody:
		field := "session_id"
		if len(t.id)%2 == 0 {
			field = "user"
		}
		k = policy.SessionKey(func(string) string { return "" }, fmt.Appendf(nil, `{"%s":%q,"prompt_len":%d}`, field, t.id, len(t.ctx)))
	default:
		k = policy.SessionKey(nil, body)
	}
	req := policy.Request{SessionKey: k.Value, HashOnly: k.HashOnly(), PromptTokens: len(t.ctx), ExpectedDecodeTokens: t.maxTok[t.turn],
		PrefixHash: policy.Hash64(t.g.prompt), Avoid: t.avoid}
	if !k.Found() {
		req.SessionKey = ""
	}
	req.PrefixBlocks = policy.PrefixBlockHashes(nil, body, prefixBlock, 8)
	return req
}

// promptBytes are a context's token ids as bytes (what the proxy hashes).
func promptBytes(ctx []int32) []byte {
	b := make([]byte, 4*len(ctx))
	for i, v := range ctx {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}
