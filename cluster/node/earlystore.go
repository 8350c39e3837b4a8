package node

import (
	"context"

	"github.com/asyncrl/asyncrl/cluster/weightsync"
	"github.com/asyncrl/asyncrl/config"
	"github.com/asyncrl/asyncrl/weights/store"
)

// pendingStore is the weight store a cluster term opens while it makes
// its streams (earlyWeightStore); weightSyncMode takes it, Stop waits
// for one nobody took.
type pendingStore struct {
	done   chan struct{}
	cancel context.CancelFunc
	st     store.Store
	err    error
}

// usesWeightStore reports whether the node's publisher writes to
// publisher.store: publisher.mode delta over publisher.transport store,
// with the built-in publisher (Options.Stepper brings its own).
func (n *Node) usesWeightStore() bool {
	return n.opts.Stepper == nil && n.cfg.Publisher.Mode == config.PublishDelta && n.cfg.Publisher.Transport != config.TransportDataPlane
}

// earlyWeightStore starts opening a cluster term's weight bucket
// (weightsync.OpenStore) on a goroutine of its own, so that its first
// leader election overlaps the streams' (startBus); anything else opens
// its store where it always did, in weightSyncMode.
func (n *Node) earlyWeightStore(ctx context.Context) {
	if n.opts.Remote == nil || !n.usesWeightStore() {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &pendingStore{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(p.done)
		p.st, p.err = n.openWeightStore(ctx)
	}()
	n.early = p
}

// openWeightStore opens publisher.store for this run, emptied; a
// cluster term's bucket is made through clusterRetry.
func (n *Node) openWeightStore(ctx context.Context) (store.Store, error) {
	return weightsync.OpenStore(ctx, n.cfg, weightsync.StoreOptions{Conn: n.bus.Conn(), InMemory: n.opts.InMemoryBus,
		Clustered: n.opts.Remote != nil, Replicas: n.streamReplicas(),
		Retry: func(f func(context.Context) error) error { return n.clusterRetry(ctx, f) }})
}

// weightStore is the store the weight sync publishes to: the one
// earlyWeightStore opened (waited for), else opened now.
func (n *Node) weightStore(ctx context.Context) (store.Store, error) {
	p := n.early
	if p == nil {
		return n.openWeightStore(ctx)
	}
	n.early = nil
	select {
	case <-p.done:
	case <-ctx.Done():
		p.cancel()
		<-p.done
	}
	p.cancel()
	return p.st, p.err
}

// dropEarlyStore stops an early open nobody took (a start that failed
// before its weight sync) and waits for it.
func (n *Node) dropEarlyStore() {
	if p := n.early; p != nil {
		n.early = nil
		p.cancel()
		<-p.done
	}
}
