package plan

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
	"github.com/asyncrl/asyncrl/transport/dataplane/shm"
	"github.com/asyncrl/asyncrl/transport/dataplane/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// End to end: a planned TP2·DP2 → TP4 resharding moved by real backends.
// Every trainer rank publishes its buffer once per pair; every inference
// rank fetches each pair into its own buffer through Remap and ends up
// with exactly the shards the layout says it holds.
func TestPlannedTransferOverBackends(t *testing.T) {
	m := &Model{Name: "toy", Layers: 2, Experts: 4}
	for l := range 2 {
		m.Tensors = append(m.Tensors, dense(fmt.Sprint("q", l), l, 0, 64, 32), dense(fmt.Sprint("o", l), l, 1, 32, 64), dense(fmt.Sprint("n", l), l, -1, 32))
		for e := range 4 {
			m.Tensors = append(m.Tensors, Tensor{Name: fmt.Sprintf("x%d.%d", l, e), Shape: []int64{16, 32}, DType: BF16, Layer: l, TPDim: -1, Expert: e})
		}
	}
	train, infer := Layout{TP: 2, PP: 2, DP: 2, EP: 2}, Layout{TP: 4, PP: 1, DP: 1, EP: 4}
	p, err := Build(DefaultConfig(), m, train, infer)
	if err != nil {
		t.Fatal(err)
	}
	full := fullTensors(m)
	src := shardBuffers(m, train, p.TrainOffsets, full)
	want := shardBuffers(m, infer, p.InferOffsets, full)

	dir, err := os.MkdirTemp("", "asyncrl-plan-shm-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sc := shm.DefaultConfig()
	sc.Dir = dir
	sb, err := shm.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := tcp.New(tcp.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()

	for _, be := range []dataplane.Backend{sb, tb} {
		t.Run(be.Name(), func(t *testing.T) {
			got := make([]dataplane.Buffer, infer.World())
			for r := range got {
				got[r] = make(dataplane.Buffer, p.InferOffsets.Bytes[r])
			}
			for _, pair := range p.Pairs() {
				ranges, offs := p.ByteRanges(pair.Src, pair.Dst)
				tp := &messages.TransferPlan{TransferID: fmt.Sprintf("%s-%d-%d", be.Name(), pair.Src, pair.Dst), Ranges: ranges,
					Source: fmt.Sprint("trainer-", pair.Src), Destinations: []string{fmt.Sprint("engine-", pair.Dst)}}
				if err := dataplane.Checksum(dataplane.Buffer(src[pair.Src]), tp.Ranges, dataplane.XXH3); err != nil {
					t.Fatal(err)
				}
				o, err := be.Publish(context.Background(), tp, dataplane.Buffer(src[pair.Src]))
				if err != nil {
					t.Fatal(err)
				}
				tp.URI = o.URI()
				sink, err := dataplane.Remap(got[pair.Dst], tp.Ranges, offs)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := be.Fetch(context.Background(), tp, sink); err != nil {
					t.Fatal(err)
				}
				o.Close()
			}
			for r := range got {
				if !bytes.Equal(got[r], want[r]) {
					t.Fatalf("inference rank %d does not hold its shards", r)
				}
			}
		})
	}
}
