package server_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/tinker/client"
)

// TestExpiry: a client that disappears leaves nothing behind — its
// session closes after session_timeout without heartbeats (models
// unloaded: get_info 404), and a sample result nobody fetched is evicted
// after sample_result_ttl (retrieve_future 410 naming the TTL).
func TestExpiry(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Tinker.SessionTimeout = time.Second
	cfg.Tinker.SampleResultTTL = time.Second
	_, c := start(t, cfg, "")
	ctx := ctxT(t)
	sess, model := newModel(t, ctx, c, 4)
	sampler, err := c.CreateSamplingSession(ctx, sess, 0, "asyncrl-policy", "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.ASample(ctx, client.SampleRequest(sampler, 0, []int32{1, 5}, 1, 3, 1))
	if err != nil {
		t.Fatal(err)
	}
	var modelGone, resultGone bool
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && !(modelGone && resultGone); time.Sleep(100 * time.Millisecond) {
		var ae *client.APIError
		if _, err := c.GetInfo(ctx, model); errors.As(err, &ae) && ae.Code == 404 {
			modelGone = true
		}
		if _, _, err := c.Poll(ctx, id); errors.As(err, &ae) && ae.Code == 410 {
			if !strings.Contains(ae.Body, "sample_result_ttl") {
				t.Fatalf("410 does not say why: %s", ae.Body)
			}
			resultGone = true
		}
	}
	if !modelGone || !resultGone {
		t.Fatalf("after the timeouts: model unloaded %v, result evicted %v", modelGone, resultGone)
	}
	var ae *client.APIError
	if err := c.Heartbeat(ctx, sess); !errors.As(err, &ae) || ae.Code != 404 {
		t.Fatalf("heartbeat on a timed-out session: %v, want 404", err)
	}
}
