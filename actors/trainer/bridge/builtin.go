package bridge

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/asyncrl/asyncrl/model"
)

// Phases of a TrainBatch that BuiltinChild.Hook sees.
const (
	PhaseStart = "start" // decoded and validated, before training
	PhaseSaved = "saved" // state and checkpoint written, before the reply
)

// BuiltinChild is a trainer child in Go: the built-in policy trainer
// behind frames v1 (`asyncrl worker child`). It trains model kind builtin;
// after step k it writes the serving checkpoint to out_dir/checkpoints/
// vk (BF16, what SaveServing writes) and the full state (model.SaveTrainer)
// to out_dir/state/vk, each through a temporary directory and a rename,
// and keeps the last two states (the Go side may resume from the one
// before the latest when the latest reply was lost).
type BuiltinChild struct {
	// Hook, when set, runs at each TrainBatch's phases (tests inject
	// faults with it).
	Hook func(step int64, phase string)

	tr      *model.Trainer
	normStd bool
	step    int64
	outDir  string
}

var (
	initKeys  = []string{"v", "type", "id", "model", "optimizer", "loss", "seed", "resume", "step", "out_dir"}
	trainKeys = []string{"v", "type", "id", "step", "arrays", "groups", "microbatches", "loss"}
	arrayKeys = []string{"tokens", "seq_offsets", "loss_mask", "rollout_logprobs", "versions", "advantages", "rewards", "routes", "support"}
)

// Serve answers frames from r on w until Shutdown (nil after Bye), a clean
// EOF (nil) or a stream it cannot read on (the error).
func (b *BuiltinChild) Serve(r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, 1<<16)
	bw := bufio.NewWriter(w)
	send := func(v any) error {
		body, err := EncodeFrame(v)
		if err == nil {
			err = WriteFrame(bw, body)
		}
		if err == nil {
			err = bw.Flush()
		}
		return err
	}
	for {
		body, err := ReadFrame(br, 0)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			_ = send(errFrame(0, &ChildError{Code: CodeBadFrame, Message: err.Error()}))
			return err
		}
		h, err := DecodeHeader(body)
		if err != nil {
			code := CodeBadFrame
			if errors.Is(err, ErrUnsupportedVersion) {
				code = CodeUnsupportedVersion
			}
			if err := send(errFrame(h.ID, &ChildError{Code: code, Field: "v", Message: err.Error()})); err != nil {
				return err
			}
			continue
		}
		var out any
		switch h.Type {
		case TypeInit:
			out = b.init(h, body)
		case TypeTrainBatch:
			out = b.train(h, body)
		case TypeSaveCheckpoint:
			out = b.save(h, body)
		case TypeShutdown:
			return send(Reply{Header: Header{V: ProtocolVersion, Type: TypeBye, ID: h.ID}})
		default:
			out = errFrame(h.ID, &ChildError{Code: CodeBadField, Field: "type", Message: fmt.Sprintf("unknown frame type %q", h.Type)})
		}
		if err := send(out); err != nil {
			return err
		}
	}
}

func errFrame(id uint64, e *ChildError) Reply {
	return Reply{Header: Header{V: ProtocolVersion, Type: TypeError, ID: id}, Code: e.Code, Field: e.Field, Message: e.Message}
}

func (b *BuiltinChild) init(h Header, body []byte) any {
	var in Init
	if field, err := decodeStrict(body, &in, initKeys...); err != nil {
		return errFrame(h.ID, fieldErr(field, err))
	}
	if in.Model.Kind != "builtin" {
		return errFrame(h.ID, &ChildError{Code: CodeBadField, Field: "model.kind", Message: fmt.Sprintf("%q: this child trains kind builtin only", in.Model.Kind)})
	}
	if in.OutDir == "" {
		return errFrame(h.ID, &ChildError{Code: CodeBadField, Field: "out_dir", Message: "required"})
	}
	tcfg, normStd, cerr := trainerConfigOf(in)
	if cerr != nil {
		return errFrame(h.ID, cerr)
	}
	var tr *model.Trainer
	if in.Resume != nil {
		t, err := model.LoadTrainer(*in.Resume)
		if err != nil {
			return errFrame(h.ID, &ChildError{Code: CodeBadField, Field: "resume", Message: err.Error()})
		}
		tr = t
	} else {
		m, err := model.LoadServing(in.Model.Path)
		if err != nil {
			return errFrame(h.ID, &ChildError{Code: CodeBadField, Field: "model.path", Message: err.Error()})
		}
		if tr, err = model.NewTrainer(m, tcfg); err != nil {
			return errFrame(h.ID, &ChildError{Code: CodeBadField, Field: "loss", Message: err.Error()})
		}
	}
	b.tr, b.normStd, b.step, b.outDir = tr, normStd, in.Step, in.OutDir
	return Reply{Header: Header{V: ProtocolVersion, Type: TypeReady, ID: h.ID}, Step: in.Step,
		Worker: map[string]any{"name": "asyncrl-builtin", "protocol": int64(ProtocolVersion)}}
}

func fieldErr(field string, err error) *ChildError {
	if field != "" {
		return &ChildError{Code: CodeBadField, Field: field, Message: err.Error()}
	}
	return &ChildError{Code: CodeBadFrame, Message: err.Error()}
}

// batchOf validates a TrainBatch's arrays and builds the policy batch.
func (b *BuiltinChild) batchOf(tb TrainBatch) (model.Batch, *ChildError) {
	switch tb.Loss {
	case "", LossCrossEntropy:
	default:
		return model.Batch{}, badField("loss", "%q: want absent (the Init's policy loss) or %q", tb.Loss, LossCrossEntropy)
	}
	a, cerr := batchArraysOf(tb)
	if cerr != nil {
		return model.Batch{}, cerr
	}
	s := len(a.off) - 1
	adv := a.adv
	if adv == nil && tb.Loss == LossCrossEntropy {
		adv = make([]float32, s) // not read
	}
	if adv == nil {
		scores := make([]float64, s)
		for i, r := range a.rew {
			scores[i] = float64(r)
		}
		for _, x := range model.Advantages(scores, tb.Groups, b.normStd) {
			adv = append(adv, float32(x))
		}
	}
	batch := model.Batch{Sequences: make([]model.Sequence, s), Loss: tb.Loss}
	for i := range s {
		lo, hi := a.off[i], a.off[i+1]
		seq := model.Sequence{Tokens: a.tok[lo:hi], LossMask: a.mask[lo:hi], Advantage: adv[i], Group: tb.Groups[i]}
		if a.lp != nil {
			seq.RolloutLogprobs = a.lp[lo:hi]
		}
		if a.ver != nil {
			seq.Version = a.ver[lo:hi]
		}
		replayOf(&a, &seq, int(lo), int(hi))
		batch.Sequences[i] = seq
	}
	return batch, nil
}

// batchArrays are a TrainBatch's arrays, checked; ver and adv are nil
// when the batch has none.
type batchArrays struct {
	off      []int64
	tok      []int32
	mask     []byte
	lp       []float32
	ver      []int64
	rew, adv []float32
	// routes [T·routeStride] and support [T·supportK]: the optional
	// replay arrays (replay.go), nil when absent.
	routes, support       []int32
	routeStride, supportK int
}

// batchArrayOf is tb's array name, checked for dtype and n elements (n
// < 0: any); ok is false when an optional one is absent.
func batchArrayOf(tb TrainBatch, name, dtype string, n int, required bool) (t Tensor, ok bool, cerr *ChildError) {
	t, ok = tb.Arrays[name]
	if !ok {
		if required {
			return t, false, badField("arrays."+name, "required")
		}
		return t, false, nil
	}
	if err := t.Check(dtype, n); err != nil {
		return t, false, badField("arrays."+name, "%v", err)
	}
	return t, true, nil
}

// batchArraysOf checks tb's arrays against each other (one offset per
// sequence boundary, one token-level value per token, one reward per
// sequence) and its groups and microbatches against the sequences.
func batchArraysOf(tb TrainBatch) (batchArrays, *ChildError) {
	var a batchArrays
	for k := range tb.Arrays {
		if !contains(arrayKeys, k) {
			return a, badField("arrays."+k, "unknown array")
		}
	}
	tokT, _, e := batchArrayOf(tb, "tokens", Int32, -1, true)
	if e != nil {
		return a, e
	}
	n := len(tokT.Data) / 4
	offT, _, e := batchArrayOf(tb, "seq_offsets", Int64, -1, true)
	if e != nil {
		return a, e
	}
	a.tok, a.off = tokT.Int32s(), offT.Int64s()
	if e := checkOffsets(a.off, n); e != nil {
		return a, e
	}
	s := len(a.off) - 1
	maskT, _, e := batchArrayOf(tb, "loss_mask", Uint8, n, true)
	if e != nil {
		return a, e
	}
	// a supervised step reads no RL input
	rl := tb.Loss != LossCrossEntropy
	lpT, hasLP, e := batchArrayOf(tb, "rollout_logprobs", Float32, n, rl)
	if e != nil {
		return a, e
	}
	verT, hasVer, e := batchArrayOf(tb, "versions", Int64, n, false)
	if e != nil {
		return a, e
	}
	rewT, hasRew, e := batchArrayOf(tb, "rewards", Float32, s, rl)
	if e != nil {
		return a, e
	}
	advT, hasAdv, e := batchArrayOf(tb, "advantages", Float32, s, false)
	if e != nil {
		return a, e
	}
	if e := checkSequences(tb, s); e != nil {
		return a, e
	}
	if e := replayArraysOf(tb, n, &a); e != nil {
		return a, e
	}
	a.mask = maskT.Data
	if hasLP {
		a.lp = lpT.Float32s()
	}
	if hasRew {
		a.rew = rewT.Float32s()
	}
	if hasVer {
		a.ver = verT.Int64s()
	}
	if hasAdv {
		a.adv = advT.Float32s()
	}
	return a, nil
}

// checkOffsets: seq_offsets run from 0 to the n tokens, strictly rising,
// with at least one sequence.
func checkOffsets(off []int64, n int) *ChildError {
	if len(off) < 2 || off[0] != 0 || off[len(off)-1] != int64(n) {
		return badField("arrays.seq_offsets", "want [0 … %d] with at least one sequence, got %d offsets", n, len(off))
	}
	for i := 1; i < len(off); i++ {
		if off[i] <= off[i-1] {
			return badField("arrays.seq_offsets", "offset %d (%d) not above offset %d (%d)", i, off[i], i-1, off[i-1])
		}
	}
	return nil
}

// checkSequences: one group id per sequence, and microbatches index
// sequences.
func checkSequences(tb TrainBatch, s int) *ChildError {
	if len(tb.Groups) != s {
		return badField("groups", "%d group ids for %d sequences", len(tb.Groups), s)
	}
	for k, mb := range tb.Microbatches {
		for _, i := range mb {
			if i < 0 || i >= s {
				return badField("microbatches", "microbatch %d: index %d outside %d sequences", k, i, s)
			}
		}
	}
	return nil
}

func (b *BuiltinChild) train(h Header, body []byte) any {
	if b.tr == nil {
		return errFrame(h.ID, &ChildError{Code: CodeBadField, Field: "type", Message: "TrainBatch before Init"})
	}
	var tb TrainBatch
	if field, err := decodeStrict(body, &tb, trainKeys...); err != nil {
		return errFrame(h.ID, fieldErr(field, err))
	}
	if tb.Step != b.step+1 {
		return errFrame(h.ID, &ChildError{Code: CodeBadField, Field: "step", Message: fmt.Sprintf("step %d but the weights are at step %d", tb.Step, b.step)})
	}
	batch, cerr := b.batchOf(tb)
	if cerr != nil {
		return errFrame(h.ID, cerr)
	}
	micro := tb.Microbatches
	if micro == nil {
		micro = [][]int{make([]int, len(batch.Sequences))}
		for i := range micro[0] {
			micro[0][i] = i
		}
	}
	if b.Hook != nil {
		b.Hook(tb.Step, PhaseStart)
	}
	st, err := b.tr.StepMicrobatches(batch, micro)
	if err != nil {
		if errors.Is(err, model.ErrBatch) {
			return errFrame(h.ID, &ChildError{Code: CodeBadField, Field: "arrays", Message: err.Error()})
		}
		return errFrame(h.ID, &ChildError{Code: CodeInternal, Message: err.Error()})
	}
	ckpt := filepath.Join(b.outDir, "checkpoints", fmt.Sprintf("v%08d", tb.Step))
	state := filepath.Join(b.outDir, "state", fmt.Sprintf("v%08d", tb.Step))
	if err := writeDir(ckpt, b.tr.ServingCopy().SaveServing); err != nil {
		return errFrame(h.ID, &ChildError{Code: CodeInternal, Message: err.Error()})
	}
	if err := writeDir(state, b.tr.SaveTrainer); err != nil {
		return errFrame(h.ID, &ChildError{Code: CodeInternal, Message: err.Error()})
	}
	b.step = tb.Step
	_ = os.RemoveAll(filepath.Join(b.outDir, "state", fmt.Sprintf("v%08d", tb.Step-2)))
	_ = os.RemoveAll(filepath.Join(b.outDir, "checkpoints", fmt.Sprintf("v%08d", tb.Step-2)))
	if b.Hook != nil {
		b.Hook(tb.Step, PhaseSaved)
	}
	return Reply{Header: Header{V: ProtocolVersion, Type: TypeStepResult, ID: h.ID}, Step: tb.Step,
		Checkpoint: ckpt, State: state, Metrics: map[string]any{
			"loss": st.Loss, "clip_frac": st.ClipFrac, "kl": st.KL, "grad_norm": st.GradNorm,
			"entropy": st.Entropy, "mismatch": st.Mismatch, "is_ratio": st.ISRatio, "tokens": int64(st.Tokens),
			"mismatch_same_version": st.MismatchSameVersion, "same_version_tokens": int64(st.SameVersionTokens)}}
}

// writeDir writes a directory through a temporary sibling and a rename,
// replacing what was there (a killed child's half-written step).
func writeDir(dir string, write func(string) error) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return err
	}
	if err := write(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

func (b *BuiltinChild) save(h Header, body []byte) any {
	var sc SaveCheckpoint
	if field, err := decodeStrict(body, &sc, "v", "type", "id", "dir"); err != nil {
		return errFrame(h.ID, fieldErr(field, err))
	}
	if b.tr == nil {
		return errFrame(h.ID, &ChildError{Code: CodeBadField, Field: "type", Message: "SaveCheckpoint before Init"})
	}
	if sc.Dir == "" {
		return errFrame(h.ID, &ChildError{Code: CodeBadField, Field: "dir", Message: "required"})
	}
	if err := writeDir(sc.Dir, b.tr.SaveTrainer); err != nil {
		return errFrame(h.ID, &ChildError{Code: CodeInternal, Message: err.Error()})
	}
	return Reply{Header: Header{V: ProtocolVersion, Type: TypeSaved, ID: h.ID}, Dir: sc.Dir, Step: b.step}
}
