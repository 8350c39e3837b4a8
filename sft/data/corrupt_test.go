package data

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// An offset damaged inside an Arrow shard (after its index was cached) is
// caught on the pread path: the stream fails naming the file and row.
func TestStreamCorruptOffset(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.arrow")
	writeRows(t, p, ShardOptions{Format: FormatArrow, IDsType: "uint16"}, [][]int32{{1, 2}, {3, 4, 5}, {6}}, nil)
	s := &Shard{Path: p, Format: FormatArrow}
	if err := s.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(s.plans) != 1 || s.plans[0].offs < 0 {
		t.Fatalf("plans %+v: want the batch's file layout", s.plans)
	}
	off := s.plans[0].offs + 2*4 // row 1's end = row 2's start
	s.close()
	f, _ := os.OpenFile(p, os.O_RDWR, 0)
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], 1000)
	f.WriteAt(b[:], off)
	f.Close()

	cfg := DefaultConfig()
	cfg.Datasets = []DatasetConfig{{Name: "a", Path: p}}
	cfg.Sampler.Kind = "sequential"
	cfg.IndexDir = t.TempDir()
	// the index pass itself refuses the damaged offsets
	if _, err := Open(context.Background(), cfg); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open: %v, want ErrCorrupt", err)
	}
	// and with an index cached before the damage, the read refuses it
	writeRows(t, p, ShardOptions{Format: FormatArrow, IDsType: "uint16"}, [][]int32{{1, 2}, {3, 4, 5}, {6}}, nil)
	st, _ := os.Stat(p)
	if _, err := OpenDataset(context.Background(), cfg.Datasets[0], IndexOptions{Dir: cfg.IndexDir}); err != nil {
		t.Fatal(err)
	}
	f, _ = os.OpenFile(p, os.O_RDWR, 0)
	f.WriteAt(b[:], off)
	f.Close()
	os.Chtimes(p, st.ModTime(), st.ModTime())
	str, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer str.Close()
	str.Next(context.Background())
	_, err = str.Next(context.Background())
	var re *RowError
	if !errors.As(err, &re) || re.Path != p || re.Row != 1 || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("row 1: %v, want ErrCorrupt naming %s row 1", err, p)
	}
}
