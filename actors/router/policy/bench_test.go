package policy

import (
	"fmt"
	"math/rand"
	"testing"
	"time"
)

// BenchmarkRoute measures one Route (sticky hit, the common case) plus the
// matching Done with 16 replicas and 100k live sessions.
func BenchmarkRoute(b *testing.B) {
	for _, pol := range Policies {
		b.Run(pol, func(b *testing.B) {
			urls := make([]string, 16)
			for i := range urls {
				urls[i] = fmt.Sprintf("http://10.0.0.%d:8000", i)
			}
			c := newCore(b, policyIs(pol), urls...)
			keys := make([]string, 100_000)
			for i := range keys {
				keys[i] = fmt.Sprint("traj-", i)
				d := c.Route(t0, Request{SessionKey: keys[i], PromptTokens: 1000, ExpectedDecodeTokens: 100, PrefixHash: uint64(i / 8)})
				c.Done(t0, d.Replica, d.Tokens)
			}
			rng := rand.New(rand.NewSource(2))
			now := t0.Add(time.Second)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k := rng.Intn(len(keys))
				d := c.Route(now, Request{SessionKey: keys[k], PromptTokens: 3000, ExpectedDecodeTokens: 100, PrefixHash: uint64(k / 8)})
				c.Done(now, d.Replica, d.Tokens)
			}
		})
	}
}
