// Command zstdbench measures the delta codec's compression stage against C
// zstd (Debian's zstd binary) on the same XOR buffers, side by side and
// interleaved in one run (issue 22, "Delta codec vs C zstd"; run it with
// bench/zstd.sh or `make bench-codec-zstd`).
//
// It makes a BF16 checkpoint (values ~ N(0, 0.02)) and, per case, the next
// version: sparse updates of 1 % and 3 % of the weights (SkyRL: real
// updates change ~1–3 % of weights per step), an Adam-like update of every
// weight, and the 2 % update quantised to FP8 E4M3 (per-tensor scale). It
// writes each tensor's XOR patch (new XOR old: the bytes Encode hands to
// zstd) to its own file, then, round after round, compresses the files with
// `zstd -1`, `-3` and `-1 -T2` (one frame per file, as Encode makes one
// frame per tensor) and with klauspost's EncodeAll (as the old Encode
// configured it, plus option variants), runs Encode's per-tensor path old
// (XOR into a tensor-sized buffer, then EncodeAll) and new (XOR chunks
// into a stream encoder) and the whole delta.Encode (XOR + xxh3-128 +
// zstd), and decodes our frames with `zstd -d` and klauspost's DecodeAll. CPU time is
// the zstd child's rusage (user+sys) or this process's (getrusage), so GB
// per CPU-second is per-core speed whatever the neighbours do; wall GB/s is
// reported too. Medians over the rounds.
package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/asyncrl/asyncrl/weights/delta"
	"github.com/asyncrl/asyncrl/weights/internal/ckpttest"
	"github.com/asyncrl/asyncrl/weights/safetensors"
	"github.com/asyncrl/asyncrl/weights/store"
)

type benchCase struct {
	name      string
	base, new []safetensors.Tensor
	patches   [][]byte // XOR patch per changed tensor
	frames    [][]byte // our level-1 frames of the patches
	xorFiles  []string
	zstFiles  []string
	inBytes   int64
}

var methodFilter, cpuProfile string

type sample struct{ cpu, wall time.Duration }

type method struct {
	name   string
	decode bool
	run    func(c *benchCase) (out int64, s sample, err error)
}

func main() {
	dir := flag.String("dir", "", "scratch directory for the XOR files (required; removed unless -keep)")
	mb := flag.Int64("mb", 128, "BF16 checkpoint size in MiB")
	tensors := flag.Int("tensors", 32, "number of tensors")
	rounds := flag.Int("rounds", 3, "interleaved rounds (medians are reported)")
	zbin := flag.String("zstd", "zstd", "the zstd binary")
	only := flag.String("cases", "sparse1pct,sparse3pct,adamlike,fp8-sparse2pct", "comma-separated cases")
	keep := flag.Bool("keep", false, "keep the scratch directory")
	filter := flag.String("methods", "", "run only the methods whose name contains this")
	prof := flag.String("cpuprofile", "", "write a CPU profile of the rounds here")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "zstdbench: -dir is required")
		os.Exit(2)
	}
	methodFilter, cpuProfile = *filter, *prof
	if err := run(*dir, *mb<<20, *tensors, *rounds, *zbin, strings.Split(*only, ","), *keep); err != nil {
		fmt.Fprintln(os.Stderr, "zstdbench:", err)
		os.Exit(1)
	}
}

func run(dir string, size int64, nt, rounds int, zbin string, names []string, keep bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	ver, err := exec.Command(zbin, "--version").Output()
	if err != nil {
		return fmt.Errorf("%s --version: %w", zbin, err)
	}
	fmt.Printf("# %s %s/%s, %d cores, GOMAXPROCS %d, %s, %s", time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), ver)
	r := rand.New(rand.NewPCG(42, 42))
	base := ckpttest.Random(r, nt, size)
	cases, err := makeCases(r, base, dir, names)
	if err != nil {
		return err
	}
	var methods []method
	for _, m := range append(zstdMethods(zbin), goMethods()...) {
		if strings.Contains(m.name, methodFilter) || m.name == "zstd -1" || m.name == "zstd -d" {
			methods = append(methods, m)
		}
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	outs, err := zstdSizes(zbin, cases, methods)
	if err != nil {
		return err
	}
	res, err := runRounds(rounds, cases, methods, outs)
	if err != nil {
		return err
	}
	fmt.Printf("# load after: %s; %d rounds, medians; GB = 10^9 bytes of patch (uncompressed) per CPU-second or wall second\n", loadavg(), rounds)
	for _, c := range cases {
		printCase(c, methods, res, outs)
	}
	return nil
}

// makeCases builds and prepares (under dir) each named case's checkpoints.
func makeCases(r *rand.Rand, base []safetensors.Tensor, dir string, names []string) ([]*benchCase, error) {
	var cases []*benchCase
	for _, n := range names {
		c := &benchCase{name: n, base: base}
		switch n {
		case "sparse1pct":
			c.new = ckpttest.Update(r, base, 0.01, 0)
		case "sparse3pct":
			c.new = ckpttest.Update(r, base, 0.03, 0)
		case "adamlike":
			c.new = ckpttest.AdamLike(r, base, 1e-2)
		case "fp8-sparse2pct":
			c.base, c.new = toFP8(base, ckpttest.Update(r, base, 0.02, 0))
		default:
			return nil, fmt.Errorf("unknown case %q", n)
		}
		if err := c.prepare(filepath.Join(dir, n)); err != nil {
			return nil, err
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// zstdSizes measures the zstd binary's output bytes per case and encoding
// method, keyed "case|method".
func zstdSizes(zbin string, cases []*benchCase, methods []method) (map[string]int64, error) {
	outs := map[string]int64{}
	for _, c := range cases {
		for _, m := range methods {
			if strings.HasPrefix(m.name, "zstd ") && !m.decode {
				n, err := zstdOutBytes(zbin, m.name, c)
				if err != nil {
					return nil, err
				}
				outs[c.name+"|"+m.name] = n
			}
		}
	}
	return outs, nil
}

// runRounds runs every method on every case, rounds times interleaved,
// recording each sample and the output bytes a method reports.
func runRounds(rounds int, cases []*benchCase, methods []method, outs map[string]int64) (map[string][]sample, error) {
	res := map[string][]sample{}
	for round := range rounds {
		fmt.Fprintf(os.Stderr, "round %d/%d (load %s)\n", round+1, rounds, loadavg())
		for _, c := range cases {
			for _, m := range methods {
				runtime.GC()
				out, s, err := m.run(c)
				if err != nil {
					return nil, fmt.Errorf("%s / %s: %w", c.name, m.name, err)
				}
				k := c.name + "|" + m.name
				res[k] = append(res[k], s)
				if out > 0 {
					outs[k] = out
				}
			}
		}
	}
	return res, nil
}

// printCase prints one case's table: medians per method, relative to
// zstd -1 (encoders) or zstd -d (decoders).
func printCase(c *benchCase, methods []method, res map[string][]sample, outs map[string]int64) {
	fmt.Printf("\n## %s: %d changed tensors, %.1f MB of XOR patches\n\n", c.name, len(c.patches), float64(c.inBytes)/1e6)
	fmt.Println("| method | bytes out | % of in | GB/cpu-s | wall GB/s | cpu-s vs zstd -1 (or -d) |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: |")
	var refEnc, refDec float64
	for _, m := range methods {
		k := c.name + "|" + m.name
		cpu, wall := medians(res[k])
		gbc := float64(c.inBytes) / 1e9 / cpu.Seconds()
		gbw := float64(c.inBytes) / 1e9 / wall.Seconds()
		switch m.name {
		case "zstd -1":
			refEnc = gbc
		case "zstd -d":
			refDec = gbc
		}
		ref := refEnc
		if m.decode {
			ref = refDec
		}
		out, pct := "", ""
		if n, ok := outs[k]; ok && !m.decode {
			out, pct = fmt.Sprint(n), fmt.Sprintf("%.2f", 100*float64(n)/float64(c.inBytes))
		}
		fmt.Printf("| %s | %s | %s | %.3f | %.3f | %.2f× |\n", m.name, out, pct, gbc, gbw, gbc/ref)
	}
}

// prepare computes the XOR patches of the changed tensors, our frames of
// them, and writes both as files (one per tensor) for the zstd binary.
func (c *benchCase) prepare(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return err
	}
	defer enc.Close()
	for i := range c.base {
		if bytes.Equal(c.base[i].Data, c.new[i].Data) {
			continue
		}
		p := make([]byte, len(c.new[i].Data))
		subtle.XORBytes(p, c.new[i].Data, c.base[i].Data)
		f := enc.EncodeAll(p, nil)
		xf, zf := filepath.Join(dir, fmt.Sprintf("t%04d.xor", i)), filepath.Join(dir, fmt.Sprintf("t%04d.xor.zst", i))
		if err := os.WriteFile(xf, p, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(zf, f, 0o644); err != nil {
			return err
		}
		c.patches, c.frames = append(c.patches, p), append(c.frames, f)
		c.xorFiles, c.zstFiles = append(c.xorFiles, xf), append(c.zstFiles, zf)
		c.inBytes += int64(len(p))
	}
	return nil
}

// zstdArgs maps a method name to the zstd binary's arguments. Every file
// becomes its own frame on stdout (as Encode makes a frame per tensor);
// --single-thread is libzstd in the calling thread, no I/O threads.
var zstdArgs = map[string][]string{
	"zstd -1":     {"-1", "--single-thread"},
	"zstd -3":     {"-3", "--single-thread"},
	"zstd -1 -T2": {"-1", "-T2"},
	"zstd -d":     {"-d"},
}

func zstdMethods(zbin string) []method {
	var ms []method
	for _, name := range []string{"zstd -1", "zstd -3", "zstd -1 -T2", "zstd -d"} {
		decode := name == "zstd -d"
		ms = append(ms, method{name: name, decode: decode, run: func(c *benchCase) (int64, sample, error) {
			files := c.xorFiles
			if decode {
				files = c.zstFiles
			}
			null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				return 0, sample{}, err
			}
			defer null.Close()
			cmd := exec.Command(zbin, append(append(slices.Clone(zstdArgs[name]), "-q", "-c", "--no-progress"), files...)...)
			cmd.Stdout = null
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			t0 := time.Now()
			if err := cmd.Run(); err != nil {
				return 0, sample{}, fmt.Errorf("%v: %s", err, stderr.String())
			}
			wall := time.Since(t0)
			return 0, sample{cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), wall: wall}, nil
		}})
	}
	return ms
}

// zstdOutBytes counts what a zstd method writes (a separate, untimed run).
func zstdOutBytes(zbin, name string, c *benchCase) (int64, error) {
	cmd := exec.Command(zbin, append(append(slices.Clone(zstdArgs[name]), "-q", "-c", "--no-progress"), c.xorFiles...)...)
	var cw countWriter
	cmd.Stdout = &cw
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return int64(cw), nil
}

type countWriter int64

func (w *countWriter) Write(p []byte) (int, error) { *w += countWriter(len(p)); return len(p), nil }

// goEncoders are klauspost encoders to compare: "go fastest" is what
// Encode uses at level 1 (EncoderLevelFromZstd(1)); the others are
// variants whose frames any zstd decoder still reads.
var goEncoders = []struct {
	name string
	opts []zstd.EOption
}{
	{"go EncodeAll fastest (old Encode's)", []zstd.EOption{zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(1))}},
	{"go EncodeAll fastest, no CRC", []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false)}},
	{"go EncodeAll fastest, window 1M", []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(1 << 20)}},
	{"go EncodeAll fastest, no entropy", []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithNoEntropyCompression(true)}},
	{"go EncodeAll default (level 3)", []zstd.EOption{zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(3))}},
}

func goMethods() []method {
	var ms []method
	for _, ge := range goEncoders {
		ms = append(ms, method{name: ge.name, run: goEncoderRun(ge.opts)})
	}
	// Encode's per-tensor path without the checksum, from the two
	// checkpoints: the old one XORed each tensor into a tensor-sized buffer
	// (pooled: fresh after a GC or for a larger tensor, else reused) and
	// compressed it with EncodeAll; the new one (patchEncoder) XORs 256 KiB
	// chunks into a stream encoder (content size set, no CRC).
	for _, fresh := range []bool{true, false} {
		name := "old path: XOR to reused buffer + EncodeAll"
		if fresh {
			name = "old path: XOR to fresh buffer + EncodeAll"
		}
		ms = append(ms, method{name: name, run: oldPathRun(fresh)})
	}
	ms = append(ms, method{name: "new path: XOR chunks to stream encoder", run: newPathRun})
	for _, w := range []int{1, 2} {
		ms = append(ms, method{name: fmt.Sprintf("delta.Encode (XOR+xxh3+zstd), %d worker(s)", w), run: deltaEncodeRun(w)})
	}
	ms = append(ms, method{name: "go DecodeAll", decode: true, run: goDecodeAll})
	return ms
}

// goEncoderRun compresses every patch with EncodeAll at opts.
func goEncoderRun(opts []zstd.EOption) func(c *benchCase) (int64, sample, error) {
	return func(c *benchCase) (int64, sample, error) {
		enc, err := zstd.NewWriter(nil, append(slices.Clone(opts), zstd.WithEncoderConcurrency(1))...)
		if err != nil {
			return 0, sample{}, err
		}
		defer enc.Close()
		var dst []byte
		var out int64
		s := measure(func() {
			for _, p := range c.patches {
				dst = enc.EncodeAll(p, dst[:0])
				out += int64(len(dst))
			}
		})
		return out, s, nil
	}
}

// oldPathRun XORs each changed tensor into a (fresh or reused) buffer and
// compresses it with EncodeAll.
func oldPathRun(fresh bool) func(c *benchCase) (int64, sample, error) {
	return func(c *benchCase) (int64, sample, error) {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if err != nil {
			return 0, sample{}, err
		}
		defer enc.Close()
		var dst, buf []byte
		var out int64
		s := measure(func() {
			for i := range c.base {
				nb, bb := c.new[i].Data, c.base[i].Data
				if bytes.Equal(bb, nb) {
					continue
				}
				if fresh || cap(buf) < len(nb) {
					buf = make([]byte, len(nb))
				}
				p := buf[:len(nb)]
				subtle.XORBytes(p, nb, bb)
				dst = enc.EncodeAll(p, dst[:0])
				out += int64(len(dst))
			}
		})
		return out, s, nil
	}
}

// newPathRun XORs 256 KiB chunks of each changed tensor into a stream
// encoder.
func newPathRun(c *benchCase) (int64, sample, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false))
	if err != nil {
		return 0, sample{}, err
	}
	defer enc.Close()
	var out bytes.Buffer
	chunk := make([]byte, 256<<10)
	var total int64
	s := measure(func() {
		for i := range c.base {
			nb, bb := c.new[i].Data, c.base[i].Data
			if bytes.Equal(bb, nb) {
				continue
			}
			out.Reset()
			enc.ResetContentSize(&out, int64(len(nb)))
			for off := 0; off < len(nb); off += len(chunk) {
				end := min(off+len(chunk), len(nb))
				n := subtle.XORBytes(chunk, nb[off:end], bb[off:end])
				if _, err = enc.Write(chunk[:n]); err != nil {
					return
				}
			}
			if err = enc.Close(); err != nil {
				return
			}
			total += int64(out.Len())
		}
	})
	return total, s, err
}

// deltaEncodeRun runs delta.Encode with w workers.
func deltaEncodeRun(w int) func(c *benchCase) (int64, sample, error) {
	return func(c *benchCase) (int64, sample, error) {
		bs, err := delta.NewMemSource(c.base)
		if err != nil {
			return 0, sample{}, err
		}
		ns, err := delta.NewMemSource(c.new)
		if err != nil {
			return 0, sample{}, err
		}
		cfg := delta.DefaultEncodeConfig()
		cfg.Workers = w
		var m *delta.Manifest
		s := measure(func() { m, err = delta.Encode(context.Background(), cfg, bs, ns, 1, store.Discard{}) })
		if err != nil {
			return 0, s, err
		}
		return m.TotalCompressedNumBytes, s, nil
	}
}

// goDecodeAll decompresses every frame with DecodeAll.
func goDecodeAll(c *benchCase) (int64, sample, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<34))
	if err != nil {
		return 0, sample{}, err
	}
	defer dec.Close()
	var dst []byte
	s := measure(func() {
		for _, f := range c.frames {
			if dst, err = dec.DecodeAll(f, dst[:0]); err != nil {
				return
			}
		}
	})
	return 0, s, err
}

func measure(f func()) sample {
	c0, t0 := cpuTime(), time.Now()
	f()
	return sample{wall: time.Since(t0), cpu: cpuTime() - c0}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func medians(ss []sample) (cpu, wall time.Duration) {
	c := make([]time.Duration, len(ss))
	w := make([]time.Duration, len(ss))
	for i, s := range ss {
		c[i], w[i] = s.cpu, s.wall
	}
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	sort.Slice(w, func(i, j int) bool { return w[i] < w[j] })
	return c[len(c)/2], w[len(w)/2]
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// toFP8 quantises base and next to FP8 E4M3 with one scale per tensor
// (max |base| → 448, as a per-tensor-scaled FP8 checkpoint), so the XOR
// patches are of FP8 bytes, as a quantise-on-publish delta's would be.
func toFP8(base, next []safetensors.Tensor) (qb, qn []safetensors.Tensor) {
	var pos []float32 // the positive finite E4M3 values, ascending
	for b := range 0x7f {
		pos = append(pos, safetensors.Float32FromF8E4M3(uint8(b)))
	}
	q := func(x float32) byte {
		s := byte(0)
		if x < 0 {
			s, x = 0x80, -x
		}
		i := sort.Search(len(pos), func(i int) bool { return pos[i] >= x })
		switch {
		case i == len(pos):
			i--
		case i > 0 && x-pos[i-1] <= pos[i]-x:
			i--
		}
		return s | byte(i)
	}
	for i := range base {
		fb, _ := safetensors.DecodeFloat32(base[i].DType, base[i].Data, nil)
		fn, _ := safetensors.DecodeFloat32(next[i].DType, next[i].Data, nil)
		var mx float32
		for _, x := range fb {
			mx = max(mx, float32(math.Abs(float64(x))))
		}
		scale := 448 / max(mx, 1e-12)
		tb, tn := base[i], next[i]
		tb.DType, tn.DType = safetensors.F8E4M3, safetensors.F8E4M3
		tb.Data, tn.Data = make([]byte, len(fb)), make([]byte, len(fn))
		for j := range fb {
			tb.Data[j], tn.Data[j] = q(fb[j]*scale), q(fn[j]*scale)
		}
		qb, qn = append(qb, tb), append(qn, tn)
	}
	return qb, qn
}
