package lease_test

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/asyncrl/asyncrl/cluster/lease"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// onBucket runs op on b's lease bucket, as another writer of the key
// would (an operator, or a write of a contender's that the server applied
// after its call gave up), within 5 s; it returns op's revision.
func onBucket(b *natsbus.Bus, op func(context.Context, jetstream.KeyValue) (uint64, error)) (uint64, error) {
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
	return op(ctx, kv)
}

func deleteKey(b *natsbus.Bus, key string) error {
	_, err := onBucket(b, func(ctx context.Context, kv jetstream.KeyValue) (uint64, error) { return 0, kv.Delete(ctx, key) })
	return err
}

// rewriteKey writes value to key at revision rev, as a holder's renewal
// that the server applied, and returns the new revision.
func rewriteKey(b *natsbus.Bus, key string, rev uint64, value string) (uint64, error) {
	return onBucket(b, func(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
		return kv.Update(ctx, key, []byte(value), rev)
	})
}

// createKey creates key with value, as a contender's Create that the
// server applied, and returns its revision.
func createKey(b *natsbus.Bus, key, value string) (uint64, error) {
	return onBucket(b, func(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
		return kv.Create(ctx, key, []byte(value))
	})
}
