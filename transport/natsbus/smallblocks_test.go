package natsbus_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/transport"
	"github.com/asyncrl/asyncrl/transport/natsbus"
)

// largestBlock is the size of the biggest message block file the embedded
// server wrote for stream name under dir, and how many there are.
func largestBlock(t *testing.T, dir, name string) (largest int64, n int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".blk") || !strings.Contains(p, string(filepath.Separator)+name+string(filepath.Separator)) {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n++
		largest = max(largest, info.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return largest, n
}

// SmallBlocks gets the server's 4 MB blocks for an unlimited file stream
// (without it: 8 MB, the tier whose write cache an append-only ledger
// holds for the rest of a run) and keeps every message: the per-subject
// limit it is expressed with is never reached. The test writes 6 MB into
// each stream and reads the block files the server wrote, so a server
// release that sizes blocks otherwise fails it.
func TestStreamSmallBlocks(t *testing.T) {
	ctx := context.Background()
	opts := natsbus.DefaultOptions()
	opts.StoreDir = t.TempDir()
	b, err := natsbus.Connect(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const msgs, size = 600, 10 << 10
	payload := []byte(strings.Repeat("x", size))
	for _, small := range []bool{false, true} {
		name := map[bool]string{false: "ledger-big", true: "ledger-small"}[small]
		subj := "asyncrl." + name + ".ledger"
		st, err := b.Stream(ctx, transport.StreamConfig{Name: name, Subjects: []string{subj}, SmallBlocks: small})
		if err != nil {
			t.Fatal(err)
		}
		for range msgs {
			if _, err := st.Publish(ctx, subj, payload); err != nil {
				t.Fatal(err)
			}
		}
		if _, n := streamState(t, b, name); n != msgs {
			t.Fatalf("%s: %d messages kept, want all %d", name, n, msgs)
		}
		largest, blocks := largestBlock(t, opts.StoreDir, name)
		const four = 4 << 20
		switch {
		case small && (largest > four+2*size || blocks < 2):
			t.Errorf("SmallBlocks: %d block files, largest %d B; want ≥ 2 blocks of ≤ 4 MB", blocks, largest)
		case !small && largest <= four+2*size:
			t.Errorf("without SmallBlocks the largest block is %d B: the server no longer gives an unlimited stream blocks over 4 MB, so SmallBlocks has no purpose", largest)
		}
		t.Logf("%s: %d block files, largest %.2f MB", name, blocks, float64(largest)/(1<<20))
	}
}
