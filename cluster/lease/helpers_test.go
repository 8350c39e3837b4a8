package lease_test

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

func deleteKey(b *natsbus.Bus, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(b.Conn())
	if err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		return err
	}
	return kv.Delete(ctx, key)
}

// rewriteKey writes value to key at revision rev, as a holder's renewal
// that the server applied, and returns the new revision.
func rewriteKey(b *natsbus.Bus, key string, rev uint64, value string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(b.Conn())
	if err != nil {
		return 0, err
	}
	kv, err := js.KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		return 0, err
	}
	return kv.Update(ctx, key, []byte(value), rev)
}

// createKey creates key with value, as a contender's Create that the
// server applied, and returns its revision.
func createKey(b *natsbus.Bus, key, value string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(b.Conn())
	if err != nil {
		return 0, err
	}
	kv, err := js.KeyValue(ctx, lease.DefaultBucket)
	if err != nil {
		return 0, err
	}
	return kv.Create(ctx, key, []byte(value))
}
