package messages

import (
	"encoding/binary"
	"fmt"
)

// ExpertDType is the element type of routed-expert ids, the smallest signed
// or unsigned integer that holds every expert id (SkyRL R3 rule).
type ExpertDType uint8

const (
	ExpertUint8 ExpertDType = 1 // fewer than 256 experts
	ExpertInt16 ExpertDType = 2 // fewer than 2^15 experts
	ExpertInt32 ExpertDType = 3 // anything larger
)

// ExpertDTypeFor returns the dtype routes of numExperts experts are stored
// in: < 256 → uint8, < 2^15 → int16, else int32 (SkyRL's rule, so a Python
// producer and this package always agree on the dtype).
func ExpertDTypeFor(numExperts int32) ExpertDType {
	switch {
	case numExperts < 256:
		return ExpertUint8
	case numExperts < 1<<15:
		return ExpertInt16
	default:
		return ExpertInt32
	}
}

// Size is the element width in bytes (0 for an invalid dtype).
func (d ExpertDType) Size() int {
	switch d {
	case ExpertUint8:
		return 1
	case ExpertInt16:
		return 2
	case ExpertInt32:
		return 4
	}
	return 0
}

// String is the numpy/pyarrow name of the dtype.
func (d ExpertDType) String() string {
	switch d {
	case ExpertUint8:
		return "uint8"
	case ExpertInt16:
		return "int16"
	case ExpertInt32:
		return "int32"
	}
	return fmt.Sprintf("ExpertDType(%d)", uint8(d))
}

func parseExpertDType(s string) (ExpertDType, bool) {
	for _, d := range []ExpertDType{ExpertUint8, ExpertInt16, ExpertInt32} {
		if d.String() == s {
			return d, true
		}
	}
	return 0, false
}

// Shape limits keep size arithmetic far from overflow on hostile metadata.
const (
	maxRouteLayers = 1 << 12
	maxRouteTopK   = 1 << 10
	maxSupportK    = 1 << 16
)

// Routes holds routed expert ids for every token of a batch: C-order
// [tokens, Layers, TopK] little-endian values of DType, exactly vLLM's
// routed_experts wire form, so bytes pass through without conversion.
type Routes struct {
	Layers int32
	TopK   int32
	// NumExperts fixes DType (ExpertDTypeFor) and bounds every value to [0, NumExperts).
	NumExperts int32
	DType      ExpertDType
	Data       []byte
}

// Stride is the number of values per token (Layers·TopK).
func (r *Routes) Stride() int { return int(r.Layers) * int(r.TopK) }

// At returns the i-th value in flat C order.
func (r *Routes) At(i int) int32 {
	switch r.DType {
	case ExpertUint8:
		return int32(r.Data[i])
	case ExpertInt16:
		return int32(int16(binary.LittleEndian.Uint16(r.Data[2*i:])))
	default:
		return int32(binary.LittleEndian.Uint32(r.Data[4*i:]))
	}
}

// firstOutOfRange scans Data with one loop per dtype (this runs on every
// decode over Σlen·L·K values, so it avoids the per-value switch of At).
func (r *Routes) firstOutOfRange() (int, int32, bool) {
	hi := r.NumExperts
	switch r.DType {
	case ExpertUint8:
		if hi >= 256 {
			return 0, 0, true
		}
		for i, v := range r.Data {
			if int32(v) >= hi {
				return i, int32(v), false
			}
		}
	case ExpertInt16:
		for i := 0; i+1 < len(r.Data); i += 2 {
			if v := int32(int16(binary.LittleEndian.Uint16(r.Data[i:]))); v < 0 || v >= hi {
				return i / 2, v, false
			}
		}
	default:
		for i := 0; i+3 < len(r.Data); i += 4 {
			if v := int32(binary.LittleEndian.Uint32(r.Data[i:])); v < 0 || v >= hi {
				return i / 4, v, false
			}
		}
	}
	return 0, 0, true
}

func (r *Routes) appendValues(vals []int32) {
	for _, v := range vals {
		switch r.DType {
		case ExpertUint8:
			r.Data = append(r.Data, uint8(v))
		case ExpertInt16:
			r.Data = binary.LittleEndian.AppendUint16(r.Data, uint16(int16(v)))
		default:
			r.Data = binary.LittleEndian.AppendUint32(r.Data, uint32(v))
		}
	}
}

// Support holds the sampling support set of every token: C-order [tokens, K]
// candidate ids with −1 padding (top-k/top-p replay).
type Support struct {
	K      int32
	Values []int32
}

// TokenBatch is B trajectories packed back to back (the trainer's layout).
// Per-trajectory slices have length B; per-token slices have length
// Offsets[B]; trajectory i owns tokens [Offsets[i], Offsets[i+1]).
// Build it with NewTokenBatch+Append or fill the fields and call Validate.
type TokenBatch struct {
	// Offsets is cu_seqlens: B+1 entries, Offsets[0]=0, non-decreasing.
	Offsets []int32

	TrajectoryIDs []string
	GroupIDs      []string
	Rewards       []float32
	// PromptLens is the number of prompt tokens at the start of each trajectory.
	PromptLens []int32

	TokenIDs []int32
	Logprobs []float32
	// LossMask is 1 where the token is trained on, 0 elsewhere.
	LossMask       []uint8
	PolicyVersions []int32
	// TokenRewards is optional (nil, or one per token).
	TokenRewards []float32

	// Routes and Support are optional (nil when absent).
	Routes  *Routes
	Support *Support

	// Vocab, when > 0, bounds token ids and support ids to [0, Vocab).
	Vocab int32
}

// BatchSpec fixes a batch's optional columns and shapes.
type BatchSpec struct {
	// Vocab, when > 0, bounds token and support ids.
	Vocab int32
	// TokenRewards adds the per-token reward column.
	TokenRewards bool
	// RouteLayers, RouteTopK, NumExperts: all > 0 adds routed experts; all 0 omits them.
	RouteLayers int32
	RouteTopK   int32
	NumExperts  int32
	// SupportK > 0 adds sample support sets of K ids per token.
	SupportK int32
}

// Validate names the first bad field.
func (s BatchSpec) Validate() error {
	switch {
	case s.Vocab < 0:
		return fmt.Errorf("messages: BatchSpec.Vocab=%d: want >= 0", s.Vocab)
	case s.SupportK < 0 || s.SupportK > maxSupportK:
		return fmt.Errorf("messages: BatchSpec.SupportK=%d: want 0..%d", s.SupportK, maxSupportK)
	}
	if s.RouteLayers == 0 && s.RouteTopK == 0 && s.NumExperts == 0 {
		return nil
	}
	switch {
	case s.RouteLayers <= 0 || s.RouteLayers > maxRouteLayers:
		return fmt.Errorf("messages: BatchSpec.RouteLayers=%d: want 1..%d (or all route fields 0)", s.RouteLayers, maxRouteLayers)
	case s.RouteTopK <= 0 || s.RouteTopK > maxRouteTopK:
		return fmt.Errorf("messages: BatchSpec.RouteTopK=%d: want 1..%d (or all route fields 0)", s.RouteTopK, maxRouteTopK)
	case s.NumExperts <= 0:
		return fmt.Errorf("messages: BatchSpec.NumExperts=%d: want > 0 (or all route fields 0)", s.NumExperts)
	}
	return nil
}

// NewTokenBatch returns an empty batch with the spec's optional columns.
func NewTokenBatch(spec BatchSpec) (*TokenBatch, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	b := &TokenBatch{Offsets: []int32{0}, Vocab: spec.Vocab}
	if spec.TokenRewards {
		b.TokenRewards = []float32{}
	}
	if spec.NumExperts > 0 {
		b.Routes = &Routes{Layers: spec.RouteLayers, TopK: spec.RouteTopK, NumExperts: spec.NumExperts,
			DType: ExpertDTypeFor(spec.NumExperts), Data: []byte{}}
	}
	if spec.SupportK > 0 {
		b.Support = &Support{K: spec.SupportK, Values: []int32{}}
	}
	return b, nil
}

// Spec describes the batch's optional columns.
func (b *TokenBatch) Spec() BatchSpec {
	s := BatchSpec{Vocab: b.Vocab, TokenRewards: b.TokenRewards != nil}
	if b.Routes != nil {
		s.RouteLayers, s.RouteTopK, s.NumExperts = b.Routes.Layers, b.Routes.TopK, b.Routes.NumExperts
	}
	if b.Support != nil {
		s.SupportK = b.Support.K
	}
	return s
}

// Len is the number of trajectories B.
func (b *TokenBatch) Len() int { return len(b.TrajectoryIDs) }

// NumTokens is the total token count Offsets[B].
func (b *TokenBatch) NumTokens() int { return len(b.TokenIDs) }

// Trajectory is one unpacked trajectory, the unit rollout appends and the
// trainer slices out.
type Trajectory struct {
	ID        string
	GroupID   string
	Reward    float32
	PromptLen int32

	TokenIDs       []int32
	Logprobs       []float32
	LossMask       []uint8
	PolicyVersions []int32
	// TokenRewards: one per token iff the batch has token rewards, else nil.
	TokenRewards []float32
	// Routes: flat [len, Layers, TopK] iff the batch has routes, else nil.
	Routes []int32
	// Support: flat [len, K] iff the batch has support sets, else nil.
	Support []int32
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: token batch: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// checkTrajectory verifies t fits b's spec; it touches nothing in b.
func (b *TokenBatch) checkTrajectory(t *Trajectory) error {
	n := len(t.TokenIDs)
	if len(t.Logprobs) != n || len(t.LossMask) != n || len(t.PolicyVersions) != n {
		return malformed("trajectory %q: %d tokens but %d logprobs, %d loss_mask, %d policy_version",
			t.ID, n, len(t.Logprobs), len(t.LossMask), len(t.PolicyVersions))
	}
	if t.PromptLen < 0 || int(t.PromptLen) > n {
		return malformed("trajectory %q: prompt_len %d outside [0, %d]", t.ID, t.PromptLen, n)
	}
	if int64(len(b.TokenIDs))+int64(n) > 1<<31-1 {
		return fmt.Errorf("%w: token batch: more than 2^31-1 tokens", ErrTooLarge)
	}
	if err := checkTokens(t.TokenIDs, t.LossMask, b.Vocab, 0); err != nil {
		return err
	}
	if (b.TokenRewards != nil) != (t.TokenRewards != nil) || (t.TokenRewards != nil && len(t.TokenRewards) != n) {
		return malformed("trajectory %q: token_reward length %d, batch wants %v", t.ID, len(t.TokenRewards), b.TokenRewards != nil)
	}
	if err := b.checkTrajectoryRoutes(t); err != nil {
		return err
	}
	if b.Support == nil && t.Support != nil || b.Support != nil && len(t.Support) != n*int(b.Support.K) {
		return malformed("trajectory %q: %d support values for %d tokens", t.ID, len(t.Support), n)
	}
	return checkSupport(t.Support, b.Vocab, 0)
}

// checkTrajectoryRoutes: t carries routes iff b does, one stride per token,
// each an expert id b's routes can hold.
func (b *TokenBatch) checkTrajectoryRoutes(t *Trajectory) error {
	n := len(t.TokenIDs)
	if b.Routes == nil && t.Routes != nil || b.Routes != nil && len(t.Routes) != n*b.Routes.Stride() {
		return malformed("trajectory %q: %d route values for %d tokens", t.ID, len(t.Routes), n)
	}
	if b.Routes != nil {
		for i, v := range t.Routes {
			if v < 0 || v >= b.Routes.NumExperts {
				return malformed("trajectory %q: route value %d at %d outside [0, %d)", t.ID, v, i, b.Routes.NumExperts)
			}
		}
	}
	return nil
}

func checkTokens(ids []int32, mask []uint8, vocab int32, base int) error {
	for i, id := range ids {
		if id < 0 || (vocab > 0 && id >= vocab) {
			return malformed("token_id[%d]=%d outside [0, vocab %d)", base+i, id, vocab)
		}
	}
	for i, m := range mask {
		if m > 1 {
			return malformed("loss_mask[%d]=%d: want 0 or 1", base+i, m)
		}
	}
	return nil
}

func checkSupport(vals []int32, vocab int32, base int) error {
	for i, v := range vals {
		if v < -1 || (vocab > 0 && v >= vocab) {
			return malformed("sample_support[%d]=%d: want -1 or in [0, vocab %d)", base+i, v, vocab)
		}
	}
	return nil
}

// Append adds one trajectory. On error the batch is unchanged.
func (b *TokenBatch) Append(t Trajectory) error {
	if len(b.Offsets) == 0 {
		b.Offsets = []int32{0}
	}
	if err := b.checkTrajectory(&t); err != nil {
		return err
	}
	b.TrajectoryIDs = append(b.TrajectoryIDs, t.ID)
	b.GroupIDs = append(b.GroupIDs, t.GroupID)
	b.Rewards = append(b.Rewards, t.Reward)
	b.PromptLens = append(b.PromptLens, t.PromptLen)
	b.TokenIDs = append(b.TokenIDs, t.TokenIDs...)
	b.Logprobs = append(b.Logprobs, t.Logprobs...)
	b.LossMask = append(b.LossMask, t.LossMask...)
	b.PolicyVersions = append(b.PolicyVersions, t.PolicyVersions...)
	if b.TokenRewards != nil {
		b.TokenRewards = append(b.TokenRewards, t.TokenRewards...)
	}
	if b.Routes != nil {
		b.Routes.appendValues(t.Routes)
	}
	if b.Support != nil {
		b.Support.Values = append(b.Support.Values, t.Support...)
	}
	b.Offsets = append(b.Offsets, int32(len(b.TokenIDs)))
	return nil
}

// Trajectory slices trajectory i back out. Per-token slices share memory
// with the batch (capacity capped, so appending to them cannot clobber it);
// Routes are converted to int32 and therefore copied.
func (b *TokenBatch) Trajectory(i int) (Trajectory, error) {
	if i < 0 || i >= b.Len() || i+1 >= len(b.Offsets) {
		return Trajectory{}, fmt.Errorf("messages: token batch: trajectory %d out of range [0, %d)", i, b.Len())
	}
	lo, hi := int(b.Offsets[i]), int(b.Offsets[i+1])
	if lo < 0 || lo > hi || hi > len(b.TokenIDs) {
		return Trajectory{}, malformed("offsets[%d..%d]=%d..%d invalid for %d tokens", i, i+1, lo, hi, len(b.TokenIDs))
	}
	t := Trajectory{
		ID: b.TrajectoryIDs[i], GroupID: b.GroupIDs[i], Reward: b.Rewards[i], PromptLen: b.PromptLens[i],
		TokenIDs:       b.TokenIDs[lo:hi:hi],
		Logprobs:       b.Logprobs[lo:hi:hi],
		LossMask:       b.LossMask[lo:hi:hi],
		PolicyVersions: b.PolicyVersions[lo:hi:hi],
	}
	if b.TokenRewards != nil {
		t.TokenRewards = b.TokenRewards[lo:hi:hi]
	}
	if r := b.Routes; r != nil {
		s := r.Stride()
		t.Routes = make([]int32, (hi-lo)*s)
		for j := range t.Routes {
			t.Routes[j] = r.At(lo*s + j)
		}
	}
	if sp := b.Support; sp != nil {
		k := int(sp.K)
		t.Support = sp.Values[lo*k : hi*k : hi*k]
	}
	return t, nil
}

// Validate checks every length and offset relation and every value range.
// A batch that passes can be sliced and encoded without panics.
func (b *TokenBatch) Validate() error {
	for _, check := range []func() error{
		b.checkOffsets, b.checkColumns, b.checkPromptLens, b.checkValues, b.checkRoutes, b.checkSupportSet,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// checkOffsets: B+1 offsets from 0, monotone, ending at the token count.
func (b *TokenBatch) checkOffsets() error {
	B := len(b.TrajectoryIDs)
	T := len(b.TokenIDs)
	if len(b.Offsets) != B+1 {
		return malformed("%d offsets for %d trajectories (want B+1)", len(b.Offsets), B)
	}
	if b.Offsets[0] != 0 {
		return malformed("offsets[0]=%d: want 0", b.Offsets[0])
	}
	for i := 1; i <= B; i++ {
		if b.Offsets[i] < b.Offsets[i-1] {
			return malformed("offsets[%d]=%d < offsets[%d]=%d: not monotone", i, b.Offsets[i], i-1, b.Offsets[i-1])
		}
	}
	if int(b.Offsets[B]) != T {
		return malformed("last offset %d != %d tokens", b.Offsets[B], T)
	}
	return nil
}

// checkColumns: every per-trajectory column has B rows and every per-token
// column T.
func (b *TokenBatch) checkColumns() error {
	B := len(b.TrajectoryIDs)
	T := len(b.TokenIDs)
	if len(b.GroupIDs) != B || len(b.Rewards) != B || len(b.PromptLens) != B {
		return malformed("per-trajectory columns: %d trajectory_id, %d group_id, %d reward, %d prompt_len",
			B, len(b.GroupIDs), len(b.Rewards), len(b.PromptLens))
	}
	if len(b.Logprobs) != T || len(b.LossMask) != T || len(b.PolicyVersions) != T {
		return malformed("per-token columns: %d token_id, %d logprob, %d loss_mask, %d policy_version",
			T, len(b.Logprobs), len(b.LossMask), len(b.PolicyVersions))
	}
	if b.TokenRewards != nil && len(b.TokenRewards) != T {
		return malformed("%d token_reward for %d tokens", len(b.TokenRewards), T)
	}
	return nil
}

// checkPromptLens: each prompt fits inside its trajectory.
func (b *TokenBatch) checkPromptLens() error {
	for i, pl := range b.PromptLens {
		if pl < 0 || pl > b.Offsets[i+1]-b.Offsets[i] {
			return malformed("prompt_len[%d]=%d outside [0, %d]", i, pl, b.Offsets[i+1]-b.Offsets[i])
		}
	}
	return nil
}

// checkValues: vocab, token ids and loss mask in range.
func (b *TokenBatch) checkValues() error {
	if b.Vocab < 0 {
		return malformed("vocab %d < 0", b.Vocab)
	}
	return checkTokens(b.TokenIDs, b.LossMask, b.Vocab, 0)
}

// checkRoutes: the routes' shape, dtype, byte count and expert ids.
func (b *TokenBatch) checkRoutes() error {
	r := b.Routes
	if r == nil {
		return nil
	}
	T := len(b.TokenIDs)
	if r.Layers <= 0 || r.Layers > maxRouteLayers || r.TopK <= 0 || r.TopK > maxRouteTopK || r.NumExperts <= 0 {
		return malformed("routes shape layers=%d top_k=%d num_experts=%d", r.Layers, r.TopK, r.NumExperts)
	}
	if want := ExpertDTypeFor(r.NumExperts); r.DType != want {
		return malformed("routes dtype %s for %d experts: want %s", r.DType, r.NumExperts, want)
	}
	if want := int64(T) * int64(r.Stride()) * int64(r.DType.Size()); int64(len(r.Data)) != want {
		return malformed("routes: %d bytes, want %d (tokens %d × %d × %d × %d)", len(r.Data), want, T, r.Layers, r.TopK, r.DType.Size())
	}
	if i, v, ok := r.firstOutOfRange(); !ok {
		return malformed("routes[%d]=%d outside [0, %d)", i, v, r.NumExperts)
	}
	return nil
}

// checkSupportSet: the support sets' k, value count and token ids.
func (b *TokenBatch) checkSupportSet() error {
	s := b.Support
	if s == nil {
		return nil
	}
	T := len(b.TokenIDs)
	if s.K <= 0 || s.K > maxSupportK {
		return malformed("sample_support k=%d: want 1..%d", s.K, maxSupportK)
	}
	if int64(len(s.Values)) != int64(T)*int64(s.K) {
		return malformed("sample_support: %d values, want %d × %d", len(s.Values), T, s.K)
	}
	return checkSupport(s.Values, b.Vocab, 0)
}
