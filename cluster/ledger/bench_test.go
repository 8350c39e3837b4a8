package ledger_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/asyncrl/asyncrl/messages"
)

// BenchmarkRecordConsumeTrain measures one prompt's consume + train
// (two validated compare-and-set writes, each a read and a write) on the
// embedded server with file storage.
func BenchmarkRecordConsumeTrain(b *testing.B) {
	bus := connect(b, b.TempDir())
	defer bus.Close()
	l := open(b, bus)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprint("p", i)
		for _, s := range []messages.LedgerState{messages.LedgerConsumed, messages.LedgerTrained} {
			if _, _, err := l.Record(ctx, rec(id, s, 0)); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAppendGroup measures appending a 4 KiB group to the buffer.
func BenchmarkAppendGroup(b *testing.B) {
	bus := connect(b, b.TempDir())
	defer bus.Close()
	l := open(b, bus)
	ctx := context.Background()
	data := make([]byte, 4096)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for i := range b.N {
		if _, _, err := l.AppendGroup(ctx, fmt.Sprint("g", i), data); err != nil {
			b.Fatal(err)
		}
	}
}
