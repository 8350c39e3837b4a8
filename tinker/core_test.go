package tinker

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func lim() Limits {
	return Limits{SessionTimeout: time.Minute, ResultTTL: 10 * time.Second, ResultMaxBytes: 100,
		MaxModelsPerSession: 1, MaxPendingPerSession: 2, Tombstones: 2}
}

func TestHeartbeatTimeoutUnloadsModels(t *testing.T) {
	c := NewCore(lim())
	c.CreateSession(t0, "s")
	if _, err := c.CreateModel(t0, "s", "m", "base", 4); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateModel(t0, "s", "m2", "base", 4); !errors.Is(err, ErrQuota) {
		t.Fatalf("second model: %v, want ErrQuota", err)
	}
	if err := c.Heartbeat(t0.Add(50*time.Second), "s"); err != nil {
		t.Fatal(err)
	}
	if exp := c.Tick(t0.Add(100 * time.Second)); len(exp) != 0 {
		t.Fatalf("session expired 50 s after its heartbeat: %v", exp)
	}
	exp := c.Tick(t0.Add(111 * time.Second))
	if len(exp) != 1 || exp[0].SessionID != "s" || len(exp[0].Models) != 1 || exp[0].Models[0] != "m" {
		t.Fatalf("expired %v", exp)
	}
	if _, err := c.Model("m"); !errors.Is(err, ErrUnknownModel) {
		t.Fatal("model of an expired session still loaded")
	}
	if err := c.Heartbeat(t0.Add(112*time.Second), "s"); !errors.Is(err, ErrUnknownSession) {
		t.Fatal("heartbeat revived a closed session")
	}
}

func TestSubmitIdempotentAndQuota(t *testing.T) {
	c := NewCore(lim())
	c.CreateSession(t0, "s")
	h1, h2 := [32]byte{1}, [32]byte{2}
	id, dup, err := c.Submit(t0, Submission{ID: "a", Kind: KindSample, SessionID: "s", IdemKey: "x/1", BodyHash: h1})
	if err != nil || dup || id != "a" {
		t.Fatal(id, dup, err)
	}
	if id, dup, _ := c.Submit(t0, Submission{ID: "b", Kind: KindSample, SessionID: "s", IdemKey: "x/1", BodyHash: h1}); id != "a" || !dup {
		t.Fatalf("retry gave %s dup=%v", id, dup)
	}
	if _, _, err := c.Submit(t0, Submission{ID: "c", Kind: KindSample, SessionID: "s", IdemKey: "x/1", BodyHash: h2}); !errors.Is(err, ErrConflict) {
		t.Fatalf("other body: %v", err)
	}
	c.Submit(t0, Submission{ID: "d", Kind: KindSample, SessionID: "s"})
	if _, _, err := c.Submit(t0, Submission{ID: "e", Kind: KindSample, SessionID: "s"}); !errors.Is(err, ErrQuota) {
		t.Fatalf("third pending future: %v", err)
	}
	c.Complete(t0, "a", []byte("{}"), false)
	if _, _, err := c.Submit(t0, Submission{ID: "e", Kind: KindSample, SessionID: "s"}); err != nil {
		t.Fatalf("a finished future still counts against the quota: %v", err)
	}
}

func TestResultRetentionTTLAndBytes(t *testing.T) {
	c := NewCore(lim())
	for _, id := range []string{"a", "b", "c"} {
		c.Submit(t0, Submission{ID: id, Kind: KindSample})
	}
	c.Complete(t0, "a", make([]byte, 60), false)
	c.Complete(t0.Add(time.Second), "b", make([]byte, 30), false)
	if v := c.Lookup("a"); !v.Done {
		t.Fatal("a evicted under the byte bound")
	}
	c.Complete(t0.Add(2*time.Second), "c", make([]byte, 30), false) // 120 > 100: a goes
	if v := c.Lookup("a"); v.Found || !strings.Contains(v.Gone, "sample_result_max_bytes") {
		t.Fatalf("a: %+v, want evicted for bytes", v)
	}
	c.Tick(t0.Add(11 * time.Second)) // b finished at 1 s: past the 10 s TTL
	if v := c.Lookup("b"); v.Found || !strings.Contains(v.Gone, "sample_result_ttl") {
		t.Fatalf("b: %+v, want evicted by TTL", v)
	}
	if v := c.Lookup("c"); !v.Done {
		t.Fatal("c evicted early")
	}
	if v := c.Lookup("zzz"); v.Found || v.Gone != "" {
		t.Fatalf("unknown id: %+v", v)
	}
	if n, b := c.Held(); n != 1 || b != 30 {
		t.Fatalf("held %d results, %d bytes", n, b)
	}
}

// TestTrainingIdempotencyOutlivesEviction: a training future evicted from
// memory (its result is in the durable store) still answers a retry of
// its (model, seq_id) with the original id, and a different body with
// ErrConflict — until the model is unloaded.
func TestTrainingIdempotencyOutlivesEviction(t *testing.T) {
	h := [32]byte{7}
	c2 := NewCore(lim())
	c2.CreateSession(t0, "s")
	c2.CreateModel(t0, "s", "m", "base", 4)
	c2.Submit(t0, Submission{ID: "t1", Kind: KindTrain, SessionID: "s", ModelID: "m", IdemKey: "m/1", BodyHash: h})
	c2.Complete(t0, "t1", []byte("{}"), false)
	c2.Heartbeat(t0.Add(30*time.Second), "s")
	c2.Tick(t0.Add(40 * time.Second))
	if v := c2.Lookup("t1"); v.Found {
		t.Fatal("t1 not evicted after its TTL")
	}
	if id, dup, err := c2.Submit(t0, Submission{ID: "t2", Kind: KindTrain, SessionID: "s", ModelID: "m", IdemKey: "m/1", BodyHash: h}); err != nil || !dup || id != "t1" {
		t.Fatalf("retry after eviction: %s dup=%v err=%v, want t1", id, dup, err)
	}
	if _, _, err := c2.Submit(t0, Submission{ID: "t3", Kind: KindTrain, SessionID: "s", ModelID: "m", IdemKey: "m/1", BodyHash: [32]byte{8}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("other body after eviction: %v", err)
	}
	c2.UnloadModel("m")
	if len(c2.trainIdem) != 0 {
		t.Fatal("unloading the model kept its idempotency keys")
	}
}
