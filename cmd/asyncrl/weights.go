package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

// newWeightsCmd: asyncrl weights diff | apply | verify | snapshot — SkyRL-format delta
// versions in a sync directory (docs/weights.md).
func newWeightsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "weights",
		Short: "Publish, apply and verify SkyRL-format delta weight versions",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newWeightsDiffCmd(g), newWeightsApplyCmd(g), newWeightsVerifyCmd(g), newWeightsSnapshotCmd(g), newWeightsQuantizeCmd(g))
	return cmd
}

// progress prints a rewriting status line on stderr, only on a terminal.
type progress struct {
	w   io.Writer
	tty bool
}

func newProgress(g *globals) progress {
	p := progress{w: g.stderr}
	if f, ok := g.stderr.(*os.File); ok {
		p.tty = term.IsTerminal(int(f.Fd()))
	}
	return p
}

func (p progress) line(format string, args ...any) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K"+format, args...)
	}
}

func (p progress) done() {
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newWeightsDiffCmd(g *globals) *cobra.Command {
	var (
		baseDir, newDir, out string
		version              int64
		cfg                  = delta.DefaultEncodeConfig()
		asJSON               bool
	)
	cmd := &cobra.Command{
		Use:   "diff --base DIR --new DIR --out ROOT [--version N]",
		Short: "Publish one delta version (base_version N−1) from two checkpoint directories",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if baseDir == "" || newDir == "" || out == "" {
				return fail("asyncrl weights diff: --base, --new and --out are required")
			}
			if version < 1 {
				return fail("asyncrl weights diff: --version %d: deltas start at 1 (0 is the base)", version)
			}
			if err := cfg.Validate(); err != nil {
				return fail("asyncrl weights diff: %v", err)
			}
			base, err := safetensors.OpenDir(baseDir)
			if err != nil {
				return fail("asyncrl weights diff: --base: %v", err)
			}
			defer base.Close()
			next, err := safetensors.OpenDir(newDir)
			if err != nil {
				return fail("asyncrl weights diff: --new: %v", err)
			}
			defer next.Close()
			st, closer, err := store.Open(cmd.Context(), out)
			if err != nil {
				return fail("asyncrl weights diff: --out: %v", err)
			}
			defer closer.Close()
			where := strings.TrimSuffix(out, "/") + "/" + delta.DeltaDir(version)
			if l, ok := st.(*store.Local); ok {
				where = l.Path(delta.DeltaDir(version))
			}
			p := newProgress(g)
			p.line("asyncrl weights diff: encoding version %d (%d tensors)…", version, len(next.Names()))
			start := time.Now()
			m, err := delta.Encode(cmd.Context(), cfg, base, next, version, st)
			p.done()
			if err != nil {
				return fail("asyncrl weights diff: %v", err)
			}
			if len(m.Skipped) > 0 {
				fmt.Fprintf(g.stderr, "asyncrl weights diff: warning: skipped %d tensor(s) absent from the base checkpoint: %s\n", len(m.Skipped), strings.Join(m.Skipped[:min(10, len(m.Skipped))], ", "))
			}
			secs := time.Since(start).Seconds()
			if asJSON {
				return writeJSON(g.stdout, map[string]any{
					"version": m.Version, "base_version": m.BaseVersion, "dir": where,
					"tensors_changed": len(m.Tensors), "tensors_total": len(next.Names()),
					"total_uncompressed_num_bytes": m.TotalUncompressedNumBytes, "total_compressed_num_bytes": m.TotalCompressedNumBytes,
					"payload_files": m.PayloadFiles, "seconds": secs,
				})
			}
			ratio := 0.0
			if m.TotalUncompressedNumBytes > 0 {
				ratio = float64(m.TotalCompressedNumBytes) / float64(m.TotalUncompressedNumBytes)
			}
			fmt.Fprintf(g.stdout, "version %d (base %d): %d of %d tensors changed, %d → %d bytes (%.4f), %d payload files, %s, %.2fs\n",
				m.Version, m.BaseVersion, len(m.Tensors), len(next.Names()), m.TotalUncompressedNumBytes, m.TotalCompressedNumBytes,
				ratio, len(m.PayloadFiles), where, secs)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&baseDir, "base", "", "checkpoint `DIR` of version N−1 (model.safetensors or sharded with an index)")
	f.StringVar(&newDir, "new", "", "checkpoint `DIR` to publish as version N")
	f.StringVar(&out, "out", "", "sync location `ROOT` (a directory, file://, s3://bucket/prefix?endpoint=host:port or nats://host:port/bucket); the delta goes to ROOT/delta-{N:08d}/")
	f.Int64Var(&version, "version", 1, "version `N` to publish (its base_version is N−1)")
	f.IntVar(&cfg.Level, "level", cfg.Level, "zstd level 1 (fastest) to 22")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "tensors encoded in parallel")
	f.Float64Var(&cfg.MaxFileSizeGB, "max-file-size-gb", cfg.MaxFileSizeGB, "roll payload files over at this many GiB of compressed bytes")
	f.StringVar(&cfg.ChecksumAlgorithm, "checksum", cfg.ChecksumAlgorithm, "checksum algorithm: xxh3-128 or sha256")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// localVersion is the marker apply keeps in a checkpoint copy so the next
// apply knows where to continue: asyncrl's counterpart of SkyRL's
// state.json for a copy outside a receiver root.
type localVersion struct {
	Version         int64 `json:"version"`
	WriteInProgress bool  `json:"write_in_progress"`
}

const localVersionFile = ".asyncrl-weights-version.json"

func readLocalVersion(dir string) (localVersion, error) {
	b, err := os.ReadFile(filepath.Join(dir, localVersionFile))
	if errors.Is(err, os.ErrNotExist) {
		return localVersion{}, nil // an untouched copy is the base
	}
	if err != nil {
		return localVersion{}, err
	}
	var lv localVersion
	if err := json.Unmarshal(b, &lv); err != nil {
		return localVersion{}, fmt.Errorf("%s: %w", localVersionFile, err)
	}
	return lv, nil
}

func writeLocalVersion(dir string, lv localVersion) error {
	ls, err := store.NewLocal(dir)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(lv)
	return ls.Commit(context.Background(), localVersionFile, append(b, '\n'))
}

// weightsApplyFlags are asyncrl weights apply's flags.
type weightsApplyFlags struct {
	root, ckpt string
	to, from   int64
	workers    int
	asJSON     bool
}

func newWeightsApplyCmd(g *globals) *cobra.Command {
	var a weightsApplyFlags
	cmd := &cobra.Command{
		Use:   "apply --root ROOT --checkpoint DIR [--to V]",
		Short: "Bring a local checkpoint copy up to version V (default: the newest) by replaying deltas in place",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return a.run(cmd, g) },
	}
	f := cmd.Flags()
	f.StringVar(&a.root, "root", "", "sync location `ROOT` holding delta-{v:08d}/ versions (a directory, file://, s3:// or nats://; remote versions are downloaded to a temporary directory)")
	f.StringVar(&a.ckpt, "checkpoint", "", "local checkpoint copy `DIR`, patched in place (its version is kept in "+localVersionFile+"; none means 0, the base)")
	f.Int64Var(&a.to, "to", 0, "target version `V` (default: the newest committed version)")
	f.Int64Var(&a.from, "from", 0, "the version DIR holds, overriding its marker (e.g. 0 after restoring it from the base)")
	f.IntVar(&a.workers, "workers", delta.DefaultApplyConfig().Workers, "tensors patched in parallel")
	f.BoolVar(&a.asJSON, "json", false, "print the result as JSON")
	return cmd
}

// run is asyncrl weights apply's body: replay the versions after the
// copy's, one at a time, up to the target.
func (a *weightsApplyFlags) run(cmd *cobra.Command, g *globals) error {
	if a.root == "" || a.ckpt == "" {
		return fail("asyncrl weights apply: --root and --checkpoint are required")
	}
	ctx := cmd.Context()
	st, closer, err := store.Open(ctx, a.root)
	if err != nil {
		return fail("asyncrl weights apply: --root: %v", err)
	}
	defer closer.Close()
	src, err := newVersionSource(st)
	if err != nil {
		return fail("asyncrl weights apply: %v", err)
	}
	defer src.close()
	lv, err := a.startVersion(cmd)
	if err != nil {
		return err
	}
	if err := a.target(ctx, cmd, st, lv); err != nil {
		return err
	}
	mut, err := delta.OpenMutable(a.ckpt)
	if err != nil {
		return fail("asyncrl weights apply: %v", err)
	}
	defer mut.Close()
	p := newProgress(g)
	start, first := time.Now(), lv.Version
	for v := lv.Version + 1; v <= a.to; v++ {
		if err := a.applyVersion(ctx, g, p, src, mut, lv, v); err != nil {
			return err
		}
		lv = localVersion{Version: v}
	}
	p.done()
	secs := time.Since(start).Seconds()
	if a.asJSON {
		return writeJSON(g.stdout, map[string]any{"checkpoint": a.ckpt, "from": first, "version": lv.Version, "applied": lv.Version - first, "seconds": secs})
	}
	fmt.Fprintf(g.stdout, "%s: version %d → %d (%d deltas applied, %.2fs)\n", a.ckpt, first, lv.Version, lv.Version-first, secs)
	return nil
}

// startVersion is the version the copy holds: its marker, or --from; a
// copy an earlier apply left half-applied is refused.
func (a *weightsApplyFlags) startVersion(cmd *cobra.Command) (localVersion, error) {
	lv, err := readLocalVersion(a.ckpt)
	if err != nil {
		return lv, fail("asyncrl weights apply: %v", err)
	}
	if cmd.Flags().Changed("from") {
		lv = localVersion{Version: a.from}
	}
	if lv.WriteInProgress {
		return lv, fail("asyncrl weights apply: %s is half-applied (an earlier apply of version %d failed); restore it from the base checkpoint and pass --from 0", a.ckpt, lv.Version+1)
	}
	return lv, nil
}

// target sets a.to to the newest committed version unless --to was given,
// and refuses a target older than the copy's version lv.
func (a *weightsApplyFlags) target(ctx context.Context, cmd *cobra.Command, st store.Store, lv localVersion) error {
	if !cmd.Flags().Changed("to") {
		var err error
		if a.to, err = delta.Latest(ctx, st); err != nil {
			return fail("asyncrl weights apply: %v", err)
		}
	}
	if a.to < lv.Version {
		return fail("asyncrl weights apply: %s holds version %d, newer than --to %d", a.ckpt, lv.Version, a.to)
	}
	return nil
}

// applyVersion patches version v into mut, the copy holding lv (v's base):
// the copy's marker says write-in-progress while it is patched, then v.
func (a *weightsApplyFlags) applyVersion(ctx context.Context, g *globals, p progress, src *versionSource, mut *delta.Mutable, lv localVersion, v int64) error {
	p.line("asyncrl weights apply: version %d of %d…", v, a.to)
	dir, m, err := src.version(ctx, v)
	if err == nil && m.BaseVersion != lv.Version {
		err = fmt.Errorf("%w: version %d has base_version %d, but %s holds %d", delta.ErrChain, v, m.BaseVersion, a.ckpt, lv.Version)
	}
	if err != nil {
		p.done()
		return fail("asyncrl weights apply: %v", err)
	}
	if err := writeLocalVersion(a.ckpt, localVersion{Version: lv.Version, WriteInProgress: true}); err != nil {
		p.done()
		return fail("asyncrl weights apply: %v", err)
	}
	res, err := delta.Apply(ctx, delta.ApplyConfig{Workers: a.workers}, m, dir, mut)
	if err != nil {
		p.done()
		return fail("asyncrl weights apply: %v\n%s is now half-applied: restore it from the base checkpoint and pass --from 0", err, a.ckpt)
	}
	if len(res.Skipped) > 0 {
		p.done()
		fmt.Fprintf(g.stderr, "asyncrl weights apply: warning: version %d: skipped %d tensor(s) absent from %s: %s\n", v, len(res.Skipped), a.ckpt, strings.Join(res.Skipped[:min(10, len(res.Skipped))], ", "))
	}
	if err := writeLocalVersion(a.ckpt, localVersion{Version: v}); err != nil {
		p.done()
		return fail("asyncrl weights apply: %v", err)
	}
	return nil
}

// versionSource hands out a delta version's directory: in place for a
// local store, downloaded to a temporary directory otherwise.
type versionSource struct {
	st  store.Store
	tmp string
}

func newVersionSource(st store.Store) (*versionSource, error) {
	vs := &versionSource{st: st}
	if _, ok := st.(*store.Local); !ok {
		tmp, err := os.MkdirTemp("", "asyncrl-weights-*")
		if err != nil {
			return nil, err
		}
		vs.tmp = tmp
	}
	return vs, nil
}

func (vs *versionSource) version(ctx context.Context, v int64) (string, *delta.Manifest, error) {
	if l, ok := vs.st.(*store.Local); ok {
		dir := l.Path(delta.DeltaDir(v))
		m, err := delta.ReadManifestDir(dir, v)
		return dir, m, err
	}
	dir := filepath.Join(vs.tmp, delta.DeltaDir(v))
	m, err := delta.Fetch(ctx, vs.st, v, dir, store.DefaultWorkers)
	return dir, m, err
}

func (vs *versionSource) close() {
	if vs.tmp != "" {
		os.RemoveAll(vs.tmp)
	}
}

type verifyResult struct {
	Version         int64  `json:"version"`
	BaseVersion     int64  `json:"base_version"`
	Tensors         int    `json:"tensors"`
	CompressedBytes int64  `json:"total_compressed_num_bytes"`
	OK              bool   `json:"ok"`
	Error           string `json:"error,omitempty"`
}

func newWeightsVerifyCmd(g *globals) *cobra.Command {
	var (
		root   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "verify --root ROOT",
		Short: "Check every committed delta version: manifest, version chain, payload files and patch sizes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if root == "" {
				return fail("asyncrl weights verify: --root is required")
			}
			if !strings.Contains(root, "://") {
				if _, err := os.Stat(root); err != nil {
					return fail("asyncrl weights verify: --root: %v", err)
				}
			}
			ctx := cmd.Context()
			st, closer, err := store.Open(ctx, root)
			if err != nil {
				return fail("asyncrl weights verify: --root: %v", err)
			}
			defer closer.Close()
			src, err := newVersionSource(st)
			if err != nil {
				return fail("asyncrl weights verify: %v", err)
			}
			defer src.close()
			vs, err := delta.Versions(ctx, st)
			if err != nil {
				return fail("asyncrl weights verify: %v", err)
			}
			p := newProgress(g)
			var results []verifyResult
			bad := 0
			for i, v := range vs {
				p.line("asyncrl weights verify: version %d (%d of %d)…", v, i+1, len(vs))
				r := verifyResult{Version: v}
				dir, m, err := src.version(ctx, v)
				if err == nil {
					r.BaseVersion, r.Tensors, r.CompressedBytes = m.BaseVersion, len(m.Tensors), m.TotalCompressedNumBytes
					prev := int64(0) // the base
					if i > 0 {
						prev = vs[i-1]
					}
					if m.BaseVersion != v-1 || prev != v-1 {
						err = fmt.Errorf("%w: version %d has base_version %d and follows version %d", delta.ErrChain, v, m.BaseVersion, prev)
					}
				}
				if err == nil {
					err = delta.VerifyPayloads(ctx, m, dir)
				}
				if err != nil {
					r.Error = err.Error()
					bad++
				} else {
					r.OK = true
				}
				results = append(results, r)
			}
			p.done()
			if asJSON {
				if err := writeJSON(g.stdout, map[string]any{"root": root, "versions": results, "ok": bad == 0}); err != nil {
					return err
				}
			} else {
				for _, r := range results {
					if r.OK {
						fmt.Fprintf(g.stdout, "%s: ok (base %d, %d tensors, %d compressed bytes)\n", delta.DeltaDir(r.Version), r.BaseVersion, r.Tensors, r.CompressedBytes)
					} else {
						fmt.Fprintf(g.stdout, "%s: %s\n", delta.DeltaDir(r.Version), r.Error)
					}
				}
				if len(results) == 0 {
					fmt.Fprintf(g.stdout, "%s: no committed delta versions\n", root)
				}
			}
			if bad > 0 {
				return &exitErr{code: exitError, msg: fmt.Sprintf("asyncrl weights verify: %d of %d versions failed", bad, len(results))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&root, "root", "", "sync location `ROOT` to check (a directory, file://, s3:// or nats://)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func newWeightsSnapshotCmd(g *globals) *cobra.Command {
	var (
		kind, dir, out string
		version        int64
		asJSON         bool
	)
	cmd := &cobra.Command{
		Use:   "snapshot --kind full|lora --dir DIR --out ROOT [--version N]",
		Short: "Publish a full checkpoint (full-{N:08d}/) or a LoRA adapter (lora-{N:08d}/) with per-file checksums",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || out == "" {
				return fail("asyncrl weights snapshot: --dir and --out are required")
			}
			if kind != delta.KindFull && kind != delta.KindLoRA {
				return fail("asyncrl weights snapshot: --kind %q: want full or lora", kind)
			}
			ctx := cmd.Context()
			st, closer, err := store.Open(ctx, out)
			if err != nil {
				return fail("asyncrl weights snapshot: --out: %v", err)
			}
			defer closer.Close()
			if !cmd.Flags().Changed("version") {
				// A full checkpoint defaults to the newest delta version; a
				// LoRA adapter to the next LoRA version.
				if kind == delta.KindFull {
					version, err = delta.Latest(ctx, st)
				} else {
					var vs []int64
					vs, err = delta.SnapshotVersions(ctx, st, delta.KindLoRA)
					version = 1
					if len(vs) > 0 {
						version = vs[len(vs)-1] + 1
					}
				}
				if err != nil {
					return fail("asyncrl weights snapshot: %v", err)
				}
			}
			m, err := delta.PublishSnapshot(ctx, st, kind, version, dir, store.DefaultWorkers)
			if err != nil {
				return fail("asyncrl weights snapshot: %v", err)
			}
			if asJSON {
				return writeJSON(g.stdout, m)
			}
			fmt.Fprintf(g.stdout, "%s: %d files, %d bytes\n", delta.SnapshotDir(kind, version), len(m.Files), m.TotalNumBytes)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", delta.KindFull, "full (a checkpoint directory) or lora (adapter_model.safetensors + adapter_config.json)")
	f.StringVar(&dir, "dir", "", "the checkpoint or adapter `DIR` to publish")
	f.StringVar(&out, "out", "", "sync location `ROOT` (as for diff)")
	f.Int64Var(&version, "version", 0, "version `N` (default: the newest delta version for full, the next LoRA version for lora)")
	f.BoolVar(&asJSON, "json", false, "print the snapshot manifest as JSON")
	return cmd
}
