package data

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Each format and ids type reads back exactly what was written, masks
// included, and the index counts rows and tokens.
func TestRoundTripFormats(t *testing.T) {
	rows := [][]int32{{1, 2, 3}, {7}, {4, 5, 6, 7, 8}, {9, 9}}
	masks := [][]uint8{{0, 1, 1}, {1}, {0, 0, 1, 1, 1}, {1, 0}}
	for _, tc := range []struct {
		format, ids string
		mask        bool
	}{
		{FormatArrow, "int32", true}, {FormatArrow, "uint16", false}, {FormatArrow, "uint16", true},
		{FormatParquet, "int32", true}, {FormatParquet, "uint16", false},
		{FormatJSONL, "int32", true}, {FormatJSONL, "int32", false},
	} {
		t.Run(tc.format+"-"+tc.ids+map[bool]string{true: "-mask", false: ""}[tc.mask], func(t *testing.T) {
			dir := t.TempDir()
			var m [][]uint8
			if tc.mask {
				m = masks
			}
			// two batches per shard, two shards
			writeRows(t, filepath.Join(dir, "a."+tc.format), ShardOptions{Format: tc.format, IDsType: tc.ids, RowsPerBatch: 3}, rows, m)
			writeRows(t, filepath.Join(dir, "b."+tc.format), ShardOptions{Format: tc.format, IDsType: tc.ids, RowsPerBatch: 3}, rows[:2], sub(m, 2))
			cfg := DefaultConfig()
			cfg.Datasets = []DatasetConfig{{Name: "d", Path: dir}}
			cfg.Sampler.Kind = "sequential"
			cfg.Sampler.Epochs = 1
			s, err := Open(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got := drain(t, s, -1)
			want := append(slices.Clone(rows), rows[:2]...)
			if len(got) != len(want) {
				t.Fatalf("%d examples, want %d", len(got), len(want))
			}
			for i, ex := range got {
				if !slices.Equal(ex.Tokens, want[i]) {
					t.Errorf("example %d: tokens %v, want %v", i, ex.Tokens, want[i])
				}
				wantMask := []uint8(nil)
				if tc.mask {
					wantMask = append(slices.Clone(masks), masks[:2]...)[i]
				}
				if !slices.Equal(ex.LossMask, wantMask) {
					t.Errorf("example %d: mask %v, want %v", i, ex.LossMask, wantMask)
				}
				wantID := ExampleID{Shard: uint32(i / 4), Row: uint32(i % 4)}
				if ex.ID != wantID {
					t.Errorf("example %d: id %v, want %v", i, ex.ID, wantID)
				}
			}
			d := s.(*DataStream).Datasets()[0]
			if d.Rows != 6 || d.Tokens != 11+4 {
				t.Errorf("index: %d rows %d tokens, want 6 and 15", d.Rows, d.Tokens)
			}
		})
	}
}

func sub(m [][]uint8, n int) [][]uint8 {
	if m == nil {
		return nil
	}
	return m[:n]
}

// A labels column is a loss mask: -100 is "not a target".
func TestLabelsColumn(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "l.jsonl")
	os.WriteFile(p, []byte(`{"input_ids":[5,6,7],"labels":[-100,6,7]}`+"\n"), 0o644)
	cfg := DefaultConfig()
	cfg.Datasets = []DatasetConfig{{Name: "l", Path: p}}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ex := drain(t, s, 1)[0]
	if !slices.Equal(ex.LossMask, []uint8{0, 1, 1}) {
		t.Fatalf("mask %v, want [0 1 1]", ex.LossMask)
	}
}

// The index is built once, reused while the file is unchanged, rebuilt
// when its size or mtime changes.
func TestIndexCached(t *testing.T) {
	dir := genDir(t, GenerateOptions{Tokens: 5000, Shards: 3, VocabSize: 100, MinLen: 5, MaxLen: 50})
	open := func() *Dataset {
		d, err := OpenDataset(context.Background(), DatasetConfig{Name: "g", Path: dir}, IndexOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		return d
	}
	d := open()
	if d.IndexBuilt != 3 || d.Tokens != 5000 {
		t.Fatalf("first open: built %d indexes, %d tokens; want 3 and 5000", d.IndexBuilt, d.Tokens)
	}
	var hist int64
	for _, s := range d.Shards {
		for _, h := range s.Index.LenHist {
			hist += h
		}
	}
	if hist != d.Rows {
		t.Errorf("length histogram holds %d rows, the dataset %d", hist, d.Rows)
	}
	if d2 := open(); d2.IndexBuilt != 0 || d2.Rows != d.Rows {
		t.Fatalf("second open: built %d, rows %d; want 0 built, %d rows", d2.IndexBuilt, d2.Rows, d.Rows)
	}
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(dir, ShardName(1, FormatArrow)), later, later)
	if d3 := open(); d3.IndexBuilt != 1 {
		t.Fatalf("after touching one shard: built %d indexes, want 1", d3.IndexBuilt)
	}
	// a separate index dir leaves the data dir alone
	idx := t.TempDir()
	d4, err := OpenDataset(context.Background(), DatasetConfig{Name: "g", Path: dir}, IndexOptions{Dir: idx})
	if err != nil {
		t.Fatal(err)
	}
	d4.Close()
	ents, _ := os.ReadDir(idx)
	if len(ents) != 3 || !strings.HasSuffix(ents[0].Name(), ".idx.json") {
		t.Fatalf("index dir holds %v, want 3 .idx.json files", ents)
	}
}

// Pretokenize with a real HF tokenizer: prompt/completion lines get a mask
// that is 0 on the prompt's tokens; the ids decode back to the text.
func TestPretokenize(t *testing.T) {
	tok := loadQwen2(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	os.WriteFile(in, []byte(`{"prompt":"Hello","completion":" world"}`+"\n\n"+`{"prompt":"2+2=","completion":"4"}`+"\n"), 0o644)
	out := filepath.Join(dir, "out")
	st, err := Pretokenize(context.Background(), in, tok, PretokenizeOptions{Out: out, EOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	if st.Rows != 2 || st.Shards != 1 {
		t.Fatalf("stats %+v, want 2 rows in 1 shard", st)
	}
	cfg := DefaultConfig()
	cfg.Datasets = []DatasetConfig{{Name: "p", Path: out}}
	cfg.Sampler.Kind = "sequential"
	cfg.Sampler.Epochs = 1
	cfg.VocabSize = tok.VocabSize()
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exs := drain(t, s, -1)
	if got := tok.Decode(exs[0].Tokens); got != "Hello world" {
		t.Errorf("decoded %q, want %q", got, "Hello world")
	}
	np := len(tok.Encode("Hello"))
	for i, m := range exs[0].LossMask {
		if want := uint8(map[bool]int{true: 0, false: 1}[i < np]); m != want {
			t.Errorf("mask[%d] = %d, want %d (prompt is %d tokens)", i, m, want, np)
		}
	}
	// a line of the other kind names the file and line
	os.WriteFile(in, []byte(`{"text":"a"}`+"\n"+`{"prompt":"b","completion":"c"}`+"\n"), 0o644)
	_, err = Pretokenize(context.Background(), in, tok, PretokenizeOptions{Out: filepath.Join(dir, "o2"), EOS: -1})
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("mixed kinds: %v, want an error naming line 2", err)
	}
}
