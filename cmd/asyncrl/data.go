package main

import (
	"bufio"

	"fmt"
	"io"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/asyncrl/asyncrl/model/chattemplate"
	"github.com/asyncrl/asyncrl/model/hftokenizer"
	"github.com/asyncrl/asyncrl/sft/data"
)

// newDataCmd: asyncrl data inspect | validate | pretokenize | generate |
// bench — SFT datasets (docs/sft.md, "Data").
func newDataCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Inspect, validate, pretokenize and generate SFT datasets (Arrow, Parquet, JSONL shards)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newDataInspectCmd(g), newDataValidateCmd(g), newDataPretokenizeCmd(g), newDataGenerateCmd(g), newDataBenchCmd(g), newDataDemosCmd(g))
	return cmd
}

func newDataInspectCmd(g *globals) *cobra.Command {
	var (
		format, indexDir string
		asJSON           bool
	)
	cmd := &cobra.Command{
		Use:   "inspect PATH",
		Short: "Schema, shards, rows, tokens and a length histogram of a dataset (builds its index if needed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := data.OpenDataset(cmd.Context(), data.DatasetConfig{Name: args[0], Path: args[0], Format: format}, data.IndexOptions{Dir: indexDir})
			if err != nil {
				return fail("asyncrl data inspect: %v", err)
			}
			defer d.Close()
			var hist [data.LenBuckets]int64
			minLen, maxLen := int64(-1), int64(0)
			for _, s := range d.Shards {
				for i, h := range s.Index.LenHist {
					hist[i] += h
				}
				if s.Index.Rows > 0 && (minLen < 0 || s.Index.MinLen < minLen) {
					minLen = s.Index.MinLen
				}
				maxLen = max(maxLen, s.Index.MaxLen)
			}
			if asJSON {
				type shardOut struct {
					Path    string `json:"path"`
					Format  string `json:"format"`
					Rows    int64  `json:"rows"`
					Tokens  int64  `json:"tokens"`
					IDsType string `json:"ids_type"`
					Mask    string `json:"mask,omitempty"`
					Batches int    `json:"batches"`
				}
				out := struct {
					Rows, Tokens int64
					MinLen       int64 `json:"min_len"`
					MaxLen       int64 `json:"max_len"`
					IndexBuilt   int   `json:"index_built"`
					IndexSeconds float64
					LenHist      []int64 `json:"len_hist"`
					Shards       []shardOut
				}{Rows: d.Rows, Tokens: d.Tokens, MinLen: max(minLen, 0), MaxLen: maxLen, IndexBuilt: d.IndexBuilt, IndexSeconds: d.IndexTime.Seconds(), LenHist: hist[:]}
				for _, s := range d.Shards {
					out.Shards = append(out.Shards, shardOut{s.Path, s.Format, s.Index.Rows, s.Index.Tokens, s.Index.IDsType, s.Index.Mask, len(s.Index.BatchRows)})
				}
				return writeJSON(g.stdout, out)
			}
			w := g.stdout
			first := d.Shards[0].Index
			fmt.Fprintf(w, "dataset   %s\n", args[0])
			fmt.Fprintf(w, "schema    input_ids list<%s>", first.IDsType)
			if first.Mask != "" {
				fmt.Fprintf(w, ", %s", first.Mask)
			}
			fmt.Fprintf(w, "\nshards    %d\nrows      %d\ntokens    %d\n", len(d.Shards), d.Rows, d.Tokens)
			if d.Rows > 0 {
				fmt.Fprintf(w, "length    min %d  mean %.1f  max %d\n", max(minLen, 0), float64(d.Tokens)/float64(d.Rows), maxLen)
			}
			if d.IndexBuilt > 0 {
				fmt.Fprintf(w, "index     built for %d shards in %s\n", d.IndexBuilt, d.IndexTime.Round(time.Millisecond))
			} else {
				fmt.Fprintf(w, "index     cached\n")
			}
			for _, warn := range d.Warnings {
				fmt.Fprintf(g.stderr, "warning: %s\n", warn)
			}
			printHist(w, hist[:], d.Rows)
			tw := 0
			for _, s := range d.Shards {
				tw = max(tw, len(s.Path))
			}
			fmt.Fprintln(w)
			for i, s := range d.Shards {
				if i == 20 && len(d.Shards) > 25 {
					fmt.Fprintf(w, "  … %d more shards\n", len(d.Shards)-20)
					break
				}
				fmt.Fprintf(w, "  %-*s  %-7s %10d rows %12d tokens\n", tw, s.Path, s.Format, s.Index.Rows, s.Index.Tokens)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", "", "arrow, parquet or jsonl (default: by extension)")
	f.StringVar(&indexDir, "index-dir", "", "where shard indexes are cached (default: next to each shard)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printHist draws the log2 length histogram.
func printHist(w io.Writer, hist []int64, rows int64) {
	var peak int64
	lo, hi := -1, 0
	for i, h := range hist {
		if h > 0 {
			if lo < 0 {
				lo = i
			}
			hi = i
			peak = max(peak, h)
		}
	}
	if lo < 0 {
		return
	}
	fmt.Fprintln(w, "\nlength histogram (tokens per row)")
	for i := lo; i <= hi; i++ {
		label := "0"
		if i > 0 {
			label = fmt.Sprintf("%d–%d", int64(1)<<(i-1), int64(1)<<i-1)
		}
		bar := strings.Repeat("█", int((hist[i]*40+peak-1)/peak))
		fmt.Fprintf(w, "  %13s %10d %5.1f%% %s\n", label, hist[i], 100*float64(hist[i])/float64(rows), bar)
	}
}

func newDataValidateCmd(g *globals) *cobra.Command {
	var (
		o                data.ValidateOptions
		asJSON           bool
		tokenizer, model string
	)
	cmd := &cobra.Command{
		Use:   "validate PATH",
		Short: "Check every row of a dataset in chunks: ids within the vocabulary, lengths, mask shape and values, readable shards",
		Long: "validate reads each shard a record batch at a time and lists the first bad rows by file and\n" +
			"row (a shard that cannot be read at all — truncated, a wrong column type — is one entry\n" +
			"naming the file and the first row it cannot give). Exit status 1 when anything is bad.\n" +
			"Ids are checked against --vocab, --tokenizer or --model when given, else against the\n" +
			"tokenizer.json (or a model's config.json) in the dataset's directory or its parent;\n" +
			"the report says which.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			searched, err := validateVocab(&o, args[0], tokenizer, model)
			if err != nil {
				return fail("asyncrl data validate: %v", err)
			}
			p := newProgress(g)
			o.Progress = func(path string, rows int64) { p.line("validating %s: %d rows", path, rows) }
			rep, err := data.Validate(cmd.Context(), args[0], o)
			p.done()
			if err != nil {
				return fail("asyncrl data validate: %v", err)
			}
			if asJSON {
				if err := writeJSON(g.stdout, rep); err != nil {
					return err
				}
			} else {
				if rep.Vocab.Size > 0 {
					fmt.Fprintf(g.stdout, "ids checked against a vocabulary of %d from %s\n", rep.Vocab.Size, rep.Vocab.From)
				} else {
					fmt.Fprintf(g.stdout, "ids not checked against a vocabulary: no %s or %s with vocab_size in %s (give --tokenizer FILE, --model DIR or --vocab N)\n",
						data.TokenizerFile, data.ModelConfigFile, strings.Join(searched, " or "))
				}
				fmt.Fprintf(g.stdout, "%d shards, %d rows, %d tokens in good rows\n", rep.Shards, rep.Rows, rep.Tokens)
				for _, b := range rep.FirstBad {
					fmt.Fprintf(g.stdout, "BAD %s\n", b)
				}
				if int64(len(rep.FirstBad)) < rep.BadRows+int64(rep.BadShards) {
					fmt.Fprintf(g.stdout, "… and %d more\n", rep.BadRows+int64(rep.BadShards)-int64(len(rep.FirstBad)))
				}
			}
			if !rep.OK() {
				return fail("asyncrl data validate: %d bad rows, %d unreadable shards", rep.BadRows, rep.BadShards)
			}
			if !asJSON {
				fmt.Fprintln(g.stdout, "OK")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Format, "format", "", "arrow, parquet or jsonl (default: by extension)")
	f.IntVar(&o.VocabSize, "vocab", 0, "vocabulary size: ids must be below it (0: the tokenizer or model found next to the dataset, if any)")
	f.StringVar(&tokenizer, "tokenizer", "", "a Hugging Face tokenizer.json: ids must be below its highest id + 1")
	f.StringVar(&model, "model", "", "a model directory (its tokenizer.json, else config.json's vocab_size) or a config.json")
	f.IntVar(&o.MaxLen, "max-len", 0, "rows longer than this are bad (0: not checked)")
	f.IntVar(&o.MaxBad, "max-bad", 20, "bad rows listed (all are counted)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// validateVocab sets o's vocabulary from the one flag given (--vocab,
// --tokenizer or --model), else from a tokenizer.json or config.json next
// to the dataset. It returns the directories searched when nothing was
// found, for the report's line saying the ids were not checked.
func validateVocab(o *data.ValidateOptions, dataset, tokenizer, model string) ([]string, error) {
	given := 0
	for _, set := range []bool{o.VocabSize != 0, tokenizer != "", model != ""} {
		if set {
			given++
		}
	}
	if given > 1 {
		return nil, fmt.Errorf("give one of --vocab, --tokenizer and --model")
	}
	if o.VocabSize < 0 {
		return nil, fmt.Errorf("--vocab %d: must be ≥ 1", o.VocabSize)
	}
	var (
		v   data.Vocab
		err error
	)
	switch {
	case o.VocabSize > 0:
		o.VocabFrom = "--vocab"
		return nil, nil
	case tokenizer != "":
		v, err = data.ReadVocab(tokenizer)
	case model != "":
		v, err = data.ReadVocab(model)
	default:
		var (
			ok       bool
			searched []string
		)
		v, ok, searched, err = data.FindVocab(dataset)
		if err == nil && !ok {
			return searched, nil
		}
	}
	if err != nil {
		return nil, err
	}
	o.VocabSize, o.VocabFrom = v.Size, v.From
	return nil, nil
}

func newDataPretokenizeCmd(g *globals) *cobra.Command {
	var (
		tokPath, eos string
		o            data.PretokenizeOptions
	)
	cmd := &cobra.Command{
		Use:   "pretokenize --tokenizer DIR IN.jsonl OUTDIR",
		Short: "Tokenize JSONL ({\"text\"}, {\"prompt\",\"completion\"} or chat {\"messages\",\"tools\"} lines) into Arrow shards",
		Long: "Tokenizes a JSONL file into Arrow (or Parquet) shards. Lines are {\"text\"} (every token\n" +
			"trained), {\"prompt\", \"completion\"} (the completion's tokens trained) or chat rows\n" +
			"{\"messages\": [...], \"tools\": [...]} rendered with the tokenizer's chat template, with a\n" +
			"loss mask on the assistant's tokens only (each answer through its end-of-turn token);\n" +
			"a chat row whose rendering is not prefix-consistent is refused naming its line\n" +
			"(docs/chat.md). --tokenizer is a Hugging Face tokenizer directory or its tokenizer.json.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if tokPath == "" {
				return fail("asyncrl data pretokenize: --tokenizer is required")
			}
			tok, chat, err := loadDataTokenizer(tokPath)
			if err != nil {
				return fail("asyncrl data pretokenize: %v", err)
			}
			o.Chat = chat
			o.Out, o.EOS = args[1], -1
			if eos != "" {
				id, ok := tok.TokenID(eos)
				if !ok {
					return fail("asyncrl data pretokenize: --eos %q: not a token of %s", eos, tokPath)
				}
				o.EOS = id
			}
			p := newProgress(g)
			o.Progress = func(rows int64) { p.line("pretokenized %d rows", rows) }
			t0 := time.Now()
			st, err := data.Pretokenize(cmd.Context(), args[0], tok, o)
			p.done()
			if err != nil {
				return fail("asyncrl data pretokenize: %v", err)
			}
			fmt.Fprintf(g.stdout, "%d rows, %d tokens in %d shards under %s (%s)\n", st.Rows, st.Tokens, st.Shards, o.Out, time.Since(t0).Round(time.Millisecond))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tokPath, "tokenizer", "", "Hugging Face tokenizer `DIR` (tokenizer.json + tokenizer_config.json with the chat template chat rows need), or its tokenizer.json")
	f.StringVar(&o.Format, "format", data.FormatArrow, "output format: arrow or parquet")
	f.IntVar(&o.RowsPerShard, "rows-per-shard", 1<<20, "rows per output shard")
	f.StringVar(&eos, "eos", "", "a token (e.g. <|endoftext|>) appended to every text or prompt/completion example (not to chat rows: the template closes each turn)")
	return cmd
}

// loadDataTokenizer reads --tokenizer: a directory (its chat template, when
// it has one, renders chat rows) or a tokenizer.json file (text rows only).
func loadDataTokenizer(path string) (*hftokenizer.Tokenizer, data.ChatTokenizer, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		t, err := chattemplate.LoadDir(path)
		if err != nil {
			return nil, nil, err
		}
		if !t.HasTemplate() {
			return t.Tokenizer, nil, nil
		}
		return t.Tokenizer, t, nil
	}
	t, err := hftokenizer.Load(path)
	if err != nil {
		return nil, nil, err
	}
	return t, nil, nil
}

// parseCount reads 1000, 2^30, 16M, 1G (binary suffixes K/M/G = 2^10/2^20/2^30).
func parseCount(s string) (int64, error) {
	if b, e, ok := strings.Cut(s, "^"); ok {
		base, err1 := strconv.ParseInt(b, 10, 64)
		exp, err2 := strconv.Atoi(e)
		if err1 != nil || err2 != nil || base < 1 || exp < 0 {
			return 0, fmt.Errorf("%q: want N, N^E or N with K/M/G", s)
		}
		v := int64(1)
		for range exp {
			hi, lo := bits.Mul64(uint64(v), uint64(base))
			if hi != 0 || lo > 1<<62 {
				return 0, fmt.Errorf("%q: too large", s)
			}
			v = int64(lo)
		}
		return v, nil
	}
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q: want N, N^E or N with K/M/G", s)
	}
	return v * mult, nil
}

func newDataGenerateCmd(g *globals) *cobra.Command {
	var (
		o      data.GenerateOptions
		tokens string
	)
	cmd := &cobra.Command{
		Use:   "generate --tokens N --shards K OUTDIR",
		Short: "Write a seeded synthetic dataset of N tokens in K shards (tests, benchmarks, demos)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseCount(tokens)
			if err != nil {
				return fail("asyncrl data generate: --tokens %v", err)
			}
			o.Dir, o.Tokens = args[0], n
			p := newProgress(g)
			o.Progress = func(done, total int) { p.line("generated %d/%d shards", done, total) }
			t0 := time.Now()
			err = data.Generate(cmd.Context(), o)
			p.done()
			if err != nil {
				return fail("asyncrl data generate: %v", err)
			}
			fmt.Fprintf(g.stdout, "%d tokens in %d %s shards under %s (%s)\n", o.Tokens, o.Shards, o.Format, o.Dir, time.Since(t0).Round(time.Millisecond))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tokens, "tokens", "1M", "total tokens (N, N^E, or with K/M/G)")
	f.IntVar(&o.Shards, "shards", 4, "shard files")
	f.Uint64Var(&o.Seed, "seed", 1, "seed: the same seed gives the same dataset")
	f.IntVar(&o.VocabSize, "vocab", 32000, "ids in [0, vocab); ≤ 65536 stores uint16")
	f.IntVar(&o.MinLen, "min-len", 32, "shortest example")
	f.IntVar(&o.MaxLen, "max-len", 512, "longest example")
	f.StringVar(&o.Format, "format", data.FormatArrow, "arrow, parquet or jsonl")
	f.StringVar(&o.Pattern, "pattern", "random", "random (uniform ids) or counting (learnable: each example counts up by a stride of 1–3)")
	f.BoolVar(&o.Mask, "mask", false, "write a loss_mask (0 on each example's first quarter)")
	f.IntVar(&o.Workers, "workers", 2, "shards written in parallel")
	return cmd
}

// newDataBenchCmd measures the data path (sample → read → pack) over a
// dataset: index build time, tokens/s and the process's memory.
func newDataBenchCmd(g *globals) *cobra.Command {
	var (
		cfg               = data.DefaultConfig()
		tokens, indexDir  string
		rebuild, asJSON   bool
		pipelined         bool
		budget, dp, batch int
		strategy          string
	)
	cmd := &cobra.Command{
		Use:   "bench PATH",
		Short: "Measure the data path without a trainer: index build, sample → pack tokens/s, RSS",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseCount(tokens)
			if err != nil {
				return fail("asyncrl data bench: --tokens %v", err)
			}
			ctx := cmd.Context()
			var rebuilt *data.Dataset
			if rebuild {
				d, err := data.OpenDataset(ctx, data.DatasetConfig{Name: "bench", Path: args[0]}, data.IndexOptions{Dir: indexDir, Rebuild: true})
				if err != nil {
					return fail("asyncrl data bench: %v", err)
				}
				d.Close()
				rebuilt = d
			}
			cfg.Datasets = []data.DatasetConfig{{Name: "bench", Path: args[0]}}
			cfg.IndexDir = indexDir
			t0 := time.Now()
			s, err := data.OpenWith(ctx, cfg, func(sizes []int64, w []float64) (data.Sampler, error) {
				return data.NewSampler(cfg.Sampler, sizes, w)
			})
			if err != nil {
				return fail("asyncrl data bench: %v", err)
			}
			defer s.Close()
			openTime := time.Since(t0)
			d := s.Datasets()[0]
			if rebuilt != nil {
				d.IndexBuilt, d.IndexTime = rebuilt.IndexBuilt, rebuilt.IndexTime
			}
			runtime.GC()
			before := readMem()
			cpu0 := cpuSeconds()
			r, err := data.Throughput(ctx, s, data.ThroughputOptions{Tokens: n, Batch: batch, Pipelined: pipelined, Pack: data.PackConfig{Budget: budget, DP: dp, Strategy: strategy}})
			if err != nil {
				return fail("asyncrl data bench: %v", err)
			}
			cpu := cpuSeconds() - cpu0
			after := readMem()
			out := map[string]any{
				"dataset_rows": d.Rows, "dataset_tokens": d.Tokens, "shards": len(d.Shards),
				"open_seconds": openTime.Seconds(), "index_built": d.IndexBuilt, "index_seconds": d.IndexTime.Seconds(),
				"examples": r.Examples, "tokens": r.Tokens, "bins": r.Bins, "padding_tokens": r.PaddingTokens,
				"seconds": r.Elapsed.Seconds(), "tokens_per_second": r.TokensPerSecond(),
				"cpu_seconds": cpu, "tokens_per_cpu_second": float64(r.Tokens) / max(cpu, 1e-9), "pipelined": pipelined,
				"sampler": cfg.Sampler.Kind, "page_drops": s.Drops,
				"rss_before_kib": before["VmRSS"], "rss_kib": after["VmRSS"], "hwm_kib": after["VmHWM"],
				"rss_anon_kib": after["RssAnon"], "rss_file_kib": after["RssFile"], "gomaxprocs": runtime.GOMAXPROCS(0),
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			fmt.Fprintf(g.stdout, "dataset   %d rows, %d tokens, %d shards (index built for %d in %s; open %s)\n",
				d.Rows, d.Tokens, len(d.Shards), d.IndexBuilt, d.IndexTime.Round(time.Millisecond), openTime.Round(time.Millisecond))
			fmt.Fprintf(g.stdout, "path      %d examples, %d tokens → %d bins of %d in %s: %.1f M tokens/s (padding %.1f%%)\n",
				r.Examples, r.Tokens, r.Bins, budget, r.Elapsed.Round(time.Millisecond), r.TokensPerSecond()/1e6,
				100*float64(r.PaddingTokens)/float64(max(1, r.Bins*int64(budget))))
			fmt.Fprintf(g.stdout, "cpu       %.2f s (%.1f M tokens per CPU-second)\n", cpu, float64(r.Tokens)/max(cpu, 1e-9)/1e6)
			fmt.Fprintf(g.stdout, "sampler   %s (%d page drops)\n", cfg.Sampler.Kind, s.Drops)
			fmt.Fprintf(g.stdout, "memory    RSS %d KiB (anon %d, file %d), peak %d KiB\n", after["VmRSS"], after["RssAnon"], after["RssFile"], after["VmHWM"])
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tokens, "tokens", "0", "tokens to stream (0: one epoch of the dataset)")
	f.StringVar(&cfg.Sampler.Kind, "sampler", "shuffle", "sequential, shuffle or block_shuffle")
	f.Uint64Var(&cfg.Sampler.Seed, "seed", 1, "sampler seed")
	f.IntVar(&cfg.Sampler.BlockRows, "block-rows", data.DefaultBlockRows, "block_shuffle: rows per block")
	f.IntVar(&cfg.Sampler.Window, "window", data.DefaultWindowBlocks, "block_shuffle: blocks drawn from at a time")
	f.IntVar(&cfg.MaxLen, "max-len", 0, "truncate examples to this length (0: none; must be ≤ --budget)")
	f.IntVar(&budget, "budget", 8192, "tokens per packed bin")
	f.IntVar(&dp, "dp", 8, "bins per pack are a multiple of this")
	f.IntVar(&batch, "batch", 1024, "examples per pack call")
	f.StringVar(&strategy, "strategy", data.PackFFD, "ffd or balanced")
	f.StringVar(&indexDir, "index-dir", "", "where shard indexes are cached (default: next to each shard)")
	f.BoolVar(&pipelined, "pipelined", false, "pack on a second goroutine while reading (two cores)")
	f.BoolVar(&rebuild, "rebuild-index", false, "build the indexes anew first (measures index build time)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	cfg.Sampler.Epochs = 1
	return cmd
}

// cpuSeconds is the process's user + system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// readMem reads the memory lines of /proc/self/status in KiB (empty off Linux).
func readMem() map[string]int64 {
	out := map[string]int64{}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(k, "Vm") && !strings.HasPrefix(k, "Rss") {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) > 0 {
			n, _ := strconv.ParseInt(fields[0], 10, 64)
			out[k] = n
		}
	}
	return out
}
