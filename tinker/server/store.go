package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// record is a training future as the JetStream KV bucket holds it.
type record struct {
	State   string          `json:"state"` // pending | done | failed
	Op      string          `json:"op"`
	ModelID string          `json:"model_id,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	File    string          `json:"file,omitempty"` // result too large for a KV value
	At      time.Time       `json:"at"`
}

// futureStore keeps training futures in JetStream KV so that a restarted
// server still answers them. Results above maxValue go to a file under dir
// and the record points at it.
type futureStore struct {
	kv       jetstream.KeyValue
	prefix   string // of every key this server writes
	dir      string
	maxValue int
}

// bucketName is the KV bucket of the training futures. A server marks
// every future it finds pending at its start failed, so servers sharing
// the bucket (the tinker roles of a cluster's nodes) each keep their keys
// under their own prefix ("<node>.").
const bucketName = "asyncrl_tinker_futures"

func openStore(ctx context.Context, nc *nats.Conn, prefix string, replicas int, dir string, ttl time.Duration) (*futureStore, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("tinker: jetstream: %w", err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucketName,
		Description: "asyncrl tinker training futures", TTL: ttl, Storage: jetstream.FileStorage, Replicas: max(replicas, 1)})
	if err != nil {
		return nil, fmt.Errorf("tinker: future bucket %s: %w", bucketName, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tinker: %w", err)
	}
	return &futureStore{kv: kv, prefix: prefix, dir: dir, maxValue: int(nc.MaxPayload()) - 4096}, nil
}

func (s *futureStore) put(ctx context.Context, id string, r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(b) > s.maxValue && len(r.Result) > 0 {
		path := filepath.Join(s.dir, id+".json")
		if err := os.WriteFile(path, r.Result, 0o644); err != nil {
			return fmt.Errorf("tinker: spill future %s: %w", id, err)
		}
		r.Result, r.File = nil, path
		if b, err = json.Marshal(r); err != nil {
			return err
		}
	}
	if _, err := s.kv.Put(ctx, s.prefix+id, b); err != nil {
		return fmt.Errorf("tinker: store future %s: %w", id, err)
	}
	return nil
}

// get returns id's record and result; found false for an unknown id.
func (s *futureStore) get(ctx context.Context, id string) (record, bool, error) {
	e, err := s.kv.Get(ctx, s.prefix+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, fmt.Errorf("tinker: read future %s: %w", id, err)
	}
	var r record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return record{}, false, fmt.Errorf("tinker: future %s: %w", id, err)
	}
	if r.File != "" {
		b, err := os.ReadFile(r.File)
		if err != nil {
			return record{}, false, fmt.Errorf("tinker: future %s result: %w", id, err)
		}
		r.Result = b
	}
	return r, true, nil
}

// recover marks every future still pending as failed: the server that
// held it stopped before it finished. It returns how many it marked.
func (s *futureStore) recover(ctx context.Context, now time.Time) (int, error) {
	filter := "*" // a standalone server's keys are one token; nodes' are "<node>.<id>"
	if s.prefix != "" {
		filter = s.prefix + ">"
	}
	lister, err := s.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return 0, fmt.Errorf("tinker: list futures: %w", err)
	}
	var ids []string
	for k := range lister.Keys() {
		ids = append(ids, strings.TrimPrefix(k, s.prefix))
	}
	n := 0
	for _, id := range ids {
		r, ok, err := s.get(ctx, id)
		if err != nil || !ok || r.State != "pending" {
			continue
		}
		body, _ := json.Marshal(failure(fmt.Sprintf("the server restarted before %s on model %s finished (submitted %s); models live in memory, so create or load the model again (load_weights from a saved tinker:// path) and resubmit",
			r.Op, r.ModelID, r.At.UTC().Format(time.RFC3339)), "server"))
		r.State, r.Result, r.At = "failed", body, now
		if err := s.put(ctx, id, r); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
