package plan

import "fmt"

// Cluster is the hardware a sync runs on, for the transfer-time model.
// Trainer ranks fill nodes 0, 1, … in rank order (GPUsPerNode per node);
// the inference ranks fill the nodes after them, as in SkyRL's
// non-colocated runs, so every trainer→inference byte crosses a NIC.
type Cluster struct {
	// GPUsPerNode is the number of ranks per node (8 on H100/H200 nodes).
	GPUsPerNode int
	// NICsPerNode is the number of network adapters per node, shared evenly
	// by its GPUs (8: one per GPU on a rail-optimised H100 node).
	NICsPerNode int
	// NICGbps is each adapter's line rate in gigabits per second, one
	// direction (400 for NDR InfiniBand / 400 GbE).
	NICGbps float64
	// IntraGBps is the GPU-to-GPU bandwidth inside a node in gigabytes per
	// second, one direction (450: NVLink 4, half of its 900 GB/s total).
	IntraGBps float64
}

// DefaultCluster is an 8×H100 node with one 400 Gb/s NIC per GPU and NVLink 4.
func DefaultCluster() Cluster {
	return Cluster{GPUsPerNode: 8, NICsPerNode: 8, NICGbps: 400, IntraGBps: 450}
}

// Validate names the first field out of range.
func (c Cluster) Validate() error {
	switch {
	case c.GPUsPerNode < 1:
		return fmt.Errorf("%w: Cluster.GPUsPerNode must be >= 1, got %d", ErrBadLayout, c.GPUsPerNode)
	case c.NICsPerNode < 1:
		return fmt.Errorf("%w: Cluster.NICsPerNode must be >= 1, got %d", ErrBadLayout, c.NICsPerNode)
	case !(c.NICGbps > 0):
		return fmt.Errorf("%w: Cluster.NICGbps must be > 0, got %g", ErrBadLayout, c.NICGbps)
	case !(c.IntraGBps > 0):
		return fmt.Errorf("%w: Cluster.IntraGBps must be > 0, got %g", ErrBadLayout, c.IntraGBps)
	}
	return nil
}

// Nodes is how many nodes world ranks occupy.
func (c Cluster) Nodes(world int) int { return (world + c.GPUsPerNode - 1) / c.GPUsPerNode }

// NodeNICBytesPerSecond is one node's aggregate NIC bandwidth, one direction.
func (c Cluster) NodeNICBytesPerSecond() float64 {
	return float64(c.NICsPerNode) * c.NICGbps * 1e9 / 8
}

// RankNICBytesPerSecond is the NIC bandwidth one GPU can drive on its own:
// its share of the node's adapters, at least one adapter — a process alone
// on its node still reaches only the adapters nearest its GPU, which is
// why a broadcast from one root cannot use the whole node's NICs.
func (c Cluster) RankNICBytesPerSecond() float64 {
	n := max(c.NICsPerNode/c.GPUsPerNode, 1)
	return float64(n) * c.NICGbps * 1e9 / 8
}

// BroadcastEstimate is the NCCL-broadcast path: trainer rank 0 gathers the
// full model, then broadcasts every byte to every inference rank.
type BroadcastEstimate struct {
	// GatherNICBytes reach rank 0 from other nodes (over its NIC);
	// GatherIntraBytes from GPUs of its own node (over NVLink).
	GatherNICBytes, GatherIntraBytes int64
	// GatherSeconds: the two gather streams run at once, so the slower one.
	GatherSeconds float64
	// BroadcastBytes is the full model: a broadcast cannot send a receiver
	// only its shard.
	BroadcastBytes int64
	// BroadcastSeconds: a pipelined ring broadcast moves at its slowest
	// link's rate whatever the ring's length, and the root's link is its
	// own NIC share (RankNICBytesPerSecond).
	BroadcastSeconds float64
	// Seconds = GatherSeconds + BroadcastSeconds: the root gathers a bucket,
	// then broadcasts it, so the two add up.
	Seconds float64
}

// ShardedEstimate is the planned many-to-many pull.
type ShardedEstimate struct {
	// BusiestRankBytes is the most any one rank sends or receives
	// (Plan.Busiest); RankSeconds that over RankNICBytesPerSecond.
	BusiestRankBytes int64
	RankSeconds      float64
	// BusiestNodeBytes is the most any one node's NICs send or receive;
	// NodeSeconds that over NodeNICBytesPerSecond.
	BusiestNodeBytes int64
	NodeSeconds      float64
	// Seconds is the larger of the two bounds: every rank pulls at once.
	Seconds float64
}

// Estimate compares the two ways of moving one sync.
type Estimate struct {
	// ModelBytes is the full model; TrainNodes and InferNodes the nodes
	// each side occupies.
	ModelBytes             int64
	TrainNodes, InferNodes int
	Broadcast              BroadcastEstimate
	Sharded                ShardedEstimate
	// Speedup is Broadcast.Seconds / Sharded.Seconds.
	Speedup float64
}

// EstimateSync models the sync time of p on c: bandwidth terms only, every
// link at line rate, no per-call latency, no time spent converting or
// registering weights. It is a model to compare the two methods with and
// to see which link bounds each, not a prediction of a measured run.
func EstimateSync(c Cluster, p *Plan) (Estimate, error) {
	if err := c.Validate(); err != nil {
		return Estimate{}, err
	}
	m := p.Model
	e := Estimate{
		ModelBytes: m.Bytes(),
		TrainNodes: c.Nodes(p.Train.World()),
		InferNodes: c.Nodes(p.Infer.World()),
	}
	node := func(rank int) int { return rank / c.GPUsPerNode }

	// Broadcast: rank 0 fetches each slab it lacks from the nearest holder.
	b := &e.Broadcast
	for i := range m.Tensors {
		t := &m.Tensors[i]
		outer, inner, _ := t.geometry()
		for _, reps := range p.Train.holders(m, t) {
			bytes := outer * (reps[0].hi - reps[0].lo) * inner
			local, here := false, false
			for _, h := range reps {
				here = here || h.rank == 0
				local = local || node(h.rank) == 0
			}
			switch {
			case here:
			case local:
				b.GatherIntraBytes += bytes
			default:
				b.GatherNICBytes += bytes
			}
		}
	}
	b.GatherSeconds = max(float64(b.GatherNICBytes)/c.RankNICBytesPerSecond(), float64(b.GatherIntraBytes)/(c.IntraGBps*1e9))
	b.BroadcastBytes = e.ModelBytes
	b.BroadcastSeconds = float64(b.BroadcastBytes) / c.RankNICBytesPerSecond()
	b.Seconds = b.GatherSeconds + b.BroadcastSeconds

	// Sharded: every rank moves its share at once; a rank is bounded by its
	// NIC share, a node by all its NICs.
	s := &e.Sharded
	s.BusiestRankBytes = p.Busiest()
	s.RankSeconds = float64(s.BusiestRankBytes) / c.RankNICBytesPerSecond()
	perNode := func(bytes []int64) {
		sums := make([]int64, c.Nodes(len(bytes)))
		for r, n := range bytes {
			sums[node(r)] += n
		}
		for _, n := range sums {
			s.BusiestNodeBytes = max(s.BusiestNodeBytes, n)
		}
	}
	perNode(p.SendBytes)
	perNode(p.RecvBytes)
	s.NodeSeconds = float64(s.BusiestNodeBytes) / c.NodeNICBytesPerSecond()
	s.Seconds = max(s.RankSeconds, s.NodeSeconds)
	if s.Seconds > 0 {
		e.Speedup = b.Seconds / s.Seconds
	}
	return e, nil
}
