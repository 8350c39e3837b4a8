package data

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func validate(t *testing.T, path string, o ValidateOptions) ValidationReport {
	t.Helper()
	rep, err := Validate(context.Background(), path, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Three good shards and one truncated: the report names the truncated
// file and the first row it cannot give, and nothing else is bad.
func TestValidateTruncatedShard(t *testing.T) {
	dir := genDir(t, GenerateOptions{Tokens: 40000, Shards: 4, VocabSize: 500, MinLen: 20, MaxLen: 60, Seed: 5})
	// small batches so the cut lands after some whole batches
	bad := filepath.Join(dir, ShardName(2, FormatArrow))
	var rows [][]int32
	for i := range 1000 {
		rows = append(rows, []int32{int32(i % 500), 1, 2})
	}
	writeRows(t, bad, ShardOptions{Format: FormatArrow, IDsType: "uint16", RowsPerBatch: 100}, rows, nil)
	b, _ := os.ReadFile(bad)
	os.WriteFile(bad, b[:len(b)*55/100], 0o644)

	rep := validate(t, dir, ValidateOptions{VocabSize: 500})
	if rep.BadShards != 1 || rep.BadRows != 0 || len(rep.FirstBad) != 1 {
		t.Fatalf("report %+v: want exactly one bad shard", rep)
	}
	got := rep.FirstBad[0]
	if got.Path != bad || !strings.Contains(got.Reason, "truncated") || !strings.Contains(got.Reason, "from row 500") {
		t.Fatalf("bad entry %q: want %s, truncated, from row 500", got, bad)
	}
	// opening it for training fails the same way, naming the file
	_, err := OpenDataset(context.Background(), DatasetConfig{Name: "x", Path: dir}, IndexOptions{Dir: t.TempDir()})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("open: %v, want ErrCorrupt naming %s", err, bad)
	}
}

// input_ids of a float type is refused naming the file and the column.
func TestValidateWrongDtype(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "a.arrow")
	writeRows(t, good, ShardOptions{Format: FormatArrow}, [][]int32{{1, 2}}, nil)
	p := filepath.Join(dir, "b.arrow")
	schema := arrow.NewSchema([]arrow.Field{{Name: ColInputIDs, Type: arrow.ListOf(arrow.PrimitiveTypes.Float32)}}, nil)
	rb := array.NewRecordBuilder(memory.NewGoAllocator(), schema)
	lb := rb.Field(0).(*array.ListBuilder)
	lb.Append(true)
	lb.ValueBuilder().(*array.Float32Builder).AppendValues([]float32{1.5, 2}, nil)
	rec := rb.NewRecordBatch()
	f, _ := os.Create(p)
	w, _ := ipc.NewFileWriter(f, ipc.WithSchema(schema))
	w.Write(rec)
	w.Close()
	f.Close()

	rep := validate(t, dir, ValidateOptions{})
	if rep.BadShards != 1 || len(rep.FirstBad) != 1 || rep.Rows != 1 {
		t.Fatalf("report %+v: want one bad shard, the good one's row counted", rep)
	}
	if r := rep.FirstBad[0]; r.Path != p || !strings.Contains(r.Reason, "input_ids has type list<item: float32") {
		t.Fatalf("bad entry %q: want %s and the column's type", r, p)
	}
}

// Row-level faults name the file and row: an id over the vocabulary, a
// mask shorter than the ids, a mask value of 2, an empty row, an over-long row.
func TestValidateBadRows(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.jsonl")
	os.WriteFile(p, []byte(strings.Join([]string{
		`{"input_ids":[1,2,3],"loss_mask":[0,1,1]}`,
		`{"input_ids":[1,2,300],"loss_mask":[0,1,1]}`,
		`{"input_ids":[1,2,3],"loss_mask":[0,1]}`,
		`{"input_ids":[1,2,3],"loss_mask":[0,2,1]}`,
		`{"input_ids":[],"loss_mask":[]}`,
		`{"input_ids":[1,2,3,4,5,6],"loss_mask":[1,1,1,1,1,1]}`,
		`{"input_ids":[4]}`,
	}, "\n")), 0o644)
	rep := validate(t, dir, ValidateOptions{VocabSize: 256, MaxLen: 5})
	want := []struct {
		row  int64
		frag string
	}{{1, "id 300 outside the vocabulary"}, {2, "loss_mask has 2 values"}, {3, "loss_mask[1] = 2"}, {4, "empty"}, {5, "over max_len 5"}}
	if rep.BadRows != int64(len(want)) || rep.Rows != 7 || rep.MaskedRows != 1 {
		t.Fatalf("report %+v: want %d bad rows of 7", rep, len(want))
	}
	for i, w := range want {
		got := rep.FirstBad[i]
		if got.Path != p || got.Row != w.row || !strings.Contains(got.Reason, w.frag) {
			t.Errorf("bad[%d] = %q, want row %d: …%s…", i, got, w.row, w.frag)
		}
	}
	// the stream refuses the same row at read time, naming it
	cfg := DefaultConfig()
	cfg.Datasets = []DatasetConfig{{Name: "r", Path: p}}
	cfg.Sampler.Kind = "sequential"
	cfg.VocabSize = 256
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Next(context.Background())
	_, err = s.Next(context.Background())
	var re *RowError
	if !errors.As(err, &re) || re.Path != p || re.Row != 1 {
		t.Fatalf("stream on row 1: %v, want a RowError naming %s row 1", err, p)
	}
}

// A JSONL line that is not JSON names the file and line.
func TestJSONLBadLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.jsonl")
	os.WriteFile(p, []byte("{\"input_ids\":[1]}\n{\"input_ids\":[1,\n"), 0o644)
	rep := validate(t, p, ValidateOptions{})
	if rep.BadShards != 1 || !strings.Contains(rep.FirstBad[0].Reason, "line 2 (row 1)") {
		t.Fatalf("report %+v: want line 2 (row 1) named", rep)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Datasets = []DatasetConfig{{Name: "a", Path: "x"}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		mut  func(*Config)
		frag string
	}{
		"no datasets": {func(c *Config) { c.Datasets = nil }, "datasets"},
		"dup name":    {func(c *Config) { c.Datasets = append(c.Datasets, c.Datasets[0]) }, "datasets[1].name"},
		"format":      {func(c *Config) { c.Datasets[0].Format = "csv" }, "datasets[0].format"},
		"kind":        {func(c *Config) { c.Sampler.Kind = "zipf" }, "sampler.kind"},
		"weights":     {func(c *Config) { c.Datasets[0].Weight = 1 }, "only the mixture"},
		"partial": {func(c *Config) {
			c.Sampler.Kind = "mixture"
			c.Datasets = append(c.Datasets, DatasetConfig{Name: "b", Path: "y", Weight: 1})
		}, "set every weight or none"},
		"vocab": {func(c *Config) { c.VocabSize = -1 }, "vocab_size"},
	} {
		c := ok
		c.Datasets = append([]DatasetConfig(nil), ok.Datasets...)
		tc.mut(&c)
		err := c.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.frag) {
			t.Errorf("%s: %v, want ErrConfig naming %q", name, err, tc.frag)
		}
	}
}
