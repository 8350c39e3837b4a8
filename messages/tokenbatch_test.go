package messages

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// makeBatch builds b trajectories with deterministic pseudo-random contents.
func makeBatch(t testing.TB, spec BatchSpec, b, maxLen int, seed uint64) *TokenBatch {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	tb, err := NewTokenBatch(spec)
	if err != nil {
		t.Fatal(err)
	}
	vocab := spec.Vocab
	if vocab == 0 {
		vocab = 1000
	}
	for i := 0; i < b; i++ {
		n := 1 + rng.IntN(maxLen)
		if i == 1 {
			n = 0 // an empty trajectory is legal and exercises equal offsets
		}
		tr := Trajectory{ID: "t-" + string(rune('a'+i%26)), GroupID: "g-" + string(rune('a'+i/4%26)),
			Reward: float32(rng.IntN(5)) / 4, PromptLen: int32(n / 3),
			TokenIDs: make([]int32, n), Logprobs: make([]float32, n), LossMask: make([]uint8, n), PolicyVersions: make([]int32, n)}
		for j := 0; j < n; j++ {
			tr.TokenIDs[j] = rng.Int32N(vocab)
			tr.Logprobs[j] = -rng.Float32() * 5
			if j >= int(tr.PromptLen) {
				tr.LossMask[j] = 1
			}
			tr.PolicyVersions[j] = int32(3 + j/50)
		}
		if spec.TokenRewards {
			tr.TokenRewards = make([]float32, n)
			if n > 0 {
				tr.TokenRewards[n-1] = tr.Reward
			}
		}
		if spec.NumExperts > 0 {
			tr.Routes = make([]int32, n*int(spec.RouteLayers*spec.RouteTopK))
			for j := range tr.Routes {
				tr.Routes[j] = rng.Int32N(spec.NumExperts)
			}
		}
		if spec.SupportK > 0 {
			tr.Support = make([]int32, n*int(spec.SupportK))
			for j := range tr.Support {
				if j%int(spec.SupportK) == int(spec.SupportK)-1 {
					tr.Support[j] = -1
				} else {
					tr.Support[j] = rng.Int32N(vocab)
				}
			}
		}
		if err := tb.Append(tr); err != nil {
			t.Fatal(err)
		}
	}
	return tb
}

func TestTokenBatchArrowRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		spec BatchSpec
		want ExpertDType
	}{
		{"core columns only", BatchSpec{}, 0},
		{"vocab and token rewards", BatchSpec{Vocab: 500, TokenRewards: true}, 0},
		{"routes uint8", BatchSpec{RouteLayers: 4, RouteTopK: 2, NumExperts: 255}, ExpertUint8},
		{"routes int16", BatchSpec{RouteLayers: 3, RouteTopK: 2, NumExperts: 256}, ExpertInt16},
		{"routes int16 max", BatchSpec{RouteLayers: 1, RouteTopK: 8, NumExperts: 1<<15 - 1}, ExpertInt16},
		{"routes int32", BatchSpec{RouteLayers: 2, RouteTopK: 3, NumExperts: 1 << 15}, ExpertInt32},
		{"support", BatchSpec{Vocab: 1000, SupportK: 4}, 0},
		{"everything", BatchSpec{Vocab: 800, TokenRewards: true, RouteLayers: 5, RouteTopK: 2, NumExperts: 64, SupportK: 3}, ExpertUint8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tb := makeBatch(t, tc.spec, 7, 40, 1)
			if tb.Routes != nil && tb.Routes.DType != tc.want {
				t.Fatalf("dtype %s, want %s", tb.Routes.DType, tc.want)
			}
			b, err := EncodeTokenBatch(tb)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeTokenBatch(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tb) {
				t.Fatalf("round trip differs:\n got %+v\nwant %+v", got, tb)
			}
			// Decoded columns are views into Arrow's body buffer: decoding
			// another batch and collecting garbage must not disturb them.
			if _, err := DecodeTokenBatch(mustEncodeBatch(t, makeBatch(t, tc.spec, 5, 30, 2))); err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			if !reflect.DeepEqual(got, tb) {
				t.Fatal("decoded batch changed after another decode and a GC")
			}
			if got.Spec() != tc.spec {
				t.Fatalf("spec %+v, want %+v", got.Spec(), tc.spec)
			}
			b2, err := EncodeTokenBatch(got)
			if err != nil || string(b2) != string(b) {
				t.Fatalf("re-encode not byte-stable (err %v)", err)
			}
		})
	}
}

func TestTokenBatchEmpty(t *testing.T) {
	// Zero trajectories, and one zero-token trajectory, with every optional
	// column: zero-length Arrow buffers must decode (a bug once lost them).
	for _, spec := range []BatchSpec{{}, {Vocab: 9, TokenRewards: true, RouteLayers: 2, RouteTopK: 2, NumExperts: 300, SupportK: 2}} {
		for _, withEmpty := range []bool{false, true} {
			tb, err := NewTokenBatch(spec)
			if err != nil {
				t.Fatal(err)
			}
			if withEmpty {
				tr := Trajectory{ID: "t0", TokenIDs: []int32{}, Logprobs: []float32{}, LossMask: []uint8{}, PolicyVersions: []int32{}}
				if spec.TokenRewards {
					tr.TokenRewards = []float32{}
				}
				if err := tb.Append(tr); err != nil {
					t.Fatal(err)
				}
			}
			b, err := EncodeTokenBatch(tb)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeTokenBatch(b)
			if err != nil {
				t.Fatalf("spec %+v empty=%v: %v", spec, withEmpty, err)
			}
			if got.NumTokens() != 0 || got.Len() != tb.Len() || got.Spec() != spec || len(got.Offsets) != tb.Len()+1 {
				t.Fatalf("empty batch: %+v spec %+v", got, got.Spec())
			}
		}
	}
}

func TestTrajectorySliceOut(t *testing.T) {
	spec := BatchSpec{Vocab: 1000, TokenRewards: true, RouteLayers: 2, RouteTopK: 2, NumExperts: 300, SupportK: 2}
	// Build the trajectories by hand, append, and check each slices back out equal.
	src := makeBatch(t, spec, 5, 10, 9)
	var trajs []Trajectory
	for i := 0; i < src.Len(); i++ {
		tr, err := src.Trajectory(i)
		if err != nil {
			t.Fatal(err)
		}
		trajs = append(trajs, tr)
	}
	again, err := NewTokenBatch(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range trajs {
		if err := again.Append(tr); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(again, src) {
		t.Fatal("append(slice-out(batch)) differs from batch")
	}
	tr, _ := src.Trajectory(2)
	lo, hi := src.Offsets[2], src.Offsets[3]
	if len(tr.TokenIDs) != int(hi-lo) || len(tr.Routes) != int(hi-lo)*4 || len(tr.Support) != int(hi-lo)*2 {
		t.Fatalf("trajectory 2 sizes: %d tokens %d routes %d support for span %d", len(tr.TokenIDs), len(tr.Routes), len(tr.Support), hi-lo)
	}
	if len(tr.TokenIDs) > 0 {
		// Capacity is capped: appending to a slice-out cannot overwrite trajectory 3.
		before := append([]int32(nil), src.TokenIDs...)
		_ = append(tr.TokenIDs, 999)
		if !reflect.DeepEqual(before, src.TokenIDs) {
			t.Fatal("append to a sliced trajectory clobbered the batch")
		}
	}
	for _, i := range []int{-1, src.Len()} {
		if _, err := src.Trajectory(i); err == nil {
			t.Fatalf("Trajectory(%d) succeeded", i)
		}
	}
}

func TestAppendRejects(t *testing.T) {
	spec := BatchSpec{Vocab: 10, TokenRewards: true, RouteLayers: 1, RouteTopK: 2, NumExperts: 4, SupportK: 2}
	ok := Trajectory{ID: "t", TokenIDs: []int32{1, 2}, Logprobs: []float32{0, 0}, LossMask: []uint8{0, 1},
		PolicyVersions: []int32{1, 1}, TokenRewards: []float32{0, 1}, Routes: []int32{0, 1, 2, 3}, Support: []int32{1, -1, 2, -1}, PromptLen: 1}
	cases := map[string]func(*Trajectory){
		"short logprobs":     func(t *Trajectory) { t.Logprobs = t.Logprobs[:1] },
		"short loss mask":    func(t *Trajectory) { t.LossMask = t.LossMask[:1] },
		"short versions":     func(t *Trajectory) { t.PolicyVersions = nil },
		"prompt too long":    func(t *Trajectory) { t.PromptLen = 3 },
		"negative prompt":    func(t *Trajectory) { t.PromptLen = -1 },
		"token over vocab":   func(t *Trajectory) { t.TokenIDs = []int32{1, 10} },
		"negative token":     func(t *Trajectory) { t.TokenIDs = []int32{-1, 1} },
		"loss mask 2":        func(t *Trajectory) { t.LossMask = []uint8{0, 2} },
		"no token rewards":   func(t *Trajectory) { t.TokenRewards = nil },
		"route count":        func(t *Trajectory) { t.Routes = t.Routes[:3] },
		"route over experts": func(t *Trajectory) { t.Routes = []int32{0, 1, 2, 4} },
		"support count":      func(t *Trajectory) { t.Support = t.Support[:2] },
		"support -2":         func(t *Trajectory) { t.Support = []int32{1, -2, 2, -1} },
		"support over vocab": func(t *Trajectory) { t.Support = []int32{1, 10, 2, -1} },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			tb, err := NewTokenBatch(spec)
			if err != nil {
				t.Fatal(err)
			}
			if err := tb.Append(ok); err != nil {
				t.Fatal(err)
			}
			before := *tb
			bad := ok
			f(&bad)
			if err := tb.Append(bad); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Append = %v, want ErrMalformed", err)
			}
			if tb.Len() != 1 || len(tb.TokenIDs) != len(before.TokenIDs) || len(tb.Routes.Data) != len(before.Routes.Data) {
				t.Fatal("failed Append changed the batch")
			}
		})
	}
}

func TestValidateCatches(t *testing.T) {
	spec := BatchSpec{Vocab: 1000, TokenRewards: true, RouteLayers: 2, RouteTopK: 2, NumExperts: 300, SupportK: 2}
	cases := map[string]struct {
		f    func(*TokenBatch)
		want string
	}{
		"offsets count":         {func(b *TokenBatch) { b.Offsets = b.Offsets[:len(b.Offsets)-1] }, "offsets for"},
		"offsets[0] != 0":       {func(b *TokenBatch) { b.Offsets[0] = 1 }, "offsets[0]"},
		"offsets not monotone":  {func(b *TokenBatch) { b.Offsets[2], b.Offsets[3] = b.Offsets[3], b.Offsets[2]-1 }, "not monotone"},
		"last offset":           {func(b *TokenBatch) { b.Offsets[len(b.Offsets)-1]++ }, "last offset"},
		"group ids length":      {func(b *TokenBatch) { b.GroupIDs = b.GroupIDs[1:] }, "per-trajectory"},
		"rewards length":        {func(b *TokenBatch) { b.Rewards = append(b.Rewards, 1) }, "per-trajectory"},
		"prompt lens length":    {func(b *TokenBatch) { b.PromptLens = nil }, "per-trajectory"},
		"logprobs length":       {func(b *TokenBatch) { b.Logprobs = b.Logprobs[1:] }, "per-token"},
		"loss mask length":      {func(b *TokenBatch) { b.LossMask = b.LossMask[1:] }, "per-token"},
		"versions length":       {func(b *TokenBatch) { b.PolicyVersions = b.PolicyVersions[1:] }, "per-token"},
		"token reward length":   {func(b *TokenBatch) { b.TokenRewards = b.TokenRewards[1:] }, "token_reward"},
		"prompt len over span":  {func(b *TokenBatch) { b.PromptLens[0] = b.Offsets[1] + 1 }, "prompt_len"},
		"token over vocab":      {func(b *TokenBatch) { b.TokenIDs[0] = 1000 }, "token_id"},
		"loss mask value":       {func(b *TokenBatch) { b.LossMask[0] = 7 }, "loss_mask"},
		"routes bytes":          {func(b *TokenBatch) { b.Routes.Data = b.Routes.Data[1:] }, "routes:"},
		"routes dtype":          {func(b *TokenBatch) { b.Routes.DType = ExpertUint8 }, "dtype"},
		"routes value":          {func(b *TokenBatch) { b.Routes.Data[0], b.Routes.Data[1] = 0xff, 0x7f }, "routes["},
		"routes shape":          {func(b *TokenBatch) { b.Routes.TopK = 0 }, "routes shape"},
		"support length":        {func(b *TokenBatch) { b.Support.Values = b.Support.Values[1:] }, "sample_support:"},
		"support value":         {func(b *TokenBatch) { b.Support.Values[0] = -5 }, "sample_support["},
		"support k":             {func(b *TokenBatch) { b.Support.K = 0 }, "sample_support k"},
		"negative vocab":        {func(b *TokenBatch) { b.Vocab = -1 }, "vocab"},
		"support value > vocab": {func(b *TokenBatch) { b.Support.Values[1] = 1000 }, "sample_support["},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := makeBatch(t, spec, 6, 20, 3)
			if err := b.Validate(); err != nil {
				t.Fatalf("fresh batch invalid: %v", err)
			}
			tc.f(b)
			err := b.Validate()
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want ErrMalformed mentioning %q", err, tc.want)
			}
			if _, err := EncodeTokenBatch(b); !errors.Is(err, ErrMalformed) {
				t.Fatalf("EncodeTokenBatch of an invalid batch: %v", err)
			}
		})
	}
}

func TestBatchSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		spec  BatchSpec
		field string
	}{
		{BatchSpec{Vocab: -1}, "Vocab"},
		{BatchSpec{SupportK: -1}, "SupportK"},
		{BatchSpec{RouteTopK: 2, NumExperts: 8}, "RouteLayers"},
		{BatchSpec{RouteLayers: 2, NumExperts: 8}, "RouteTopK"},
		{BatchSpec{RouteLayers: 2, RouteTopK: 2}, "NumExperts"},
	} {
		if _, err := NewTokenBatch(tc.spec); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: %v does not name %s", tc.spec, err, tc.field)
		}
	}
}

func TestExpertDTypeFor(t *testing.T) {
	for _, tc := range []struct {
		n    int32
		want ExpertDType
	}{{1, ExpertUint8}, {255, ExpertUint8}, {256, ExpertInt16}, {1<<15 - 1, ExpertInt16}, {1 << 15, ExpertInt32}, {1 << 20, ExpertInt32}} {
		if got := ExpertDTypeFor(tc.n); got != tc.want {
			t.Errorf("ExpertDTypeFor(%d) = %s, want %s", tc.n, got, tc.want)
		}
	}
}

func TestDecodeTokenBatchErrors(t *testing.T) {
	tb := makeBatch(t, BatchSpec{Vocab: 1000, RouteLayers: 2, RouteTopK: 2, NumExperts: 16, SupportK: 2}, 4, 10, 5)
	good, err := EncodeTokenBatch(tb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeTokenBatch(nil); !errors.Is(err, ErrTruncated) {
		t.Errorf("empty: %v", err)
	}
	if _, err := DecodeTokenBatchLimit(good, len(good)-1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("over limit: %v", err)
	}
	// (The last 8 bytes are the optional end-of-stream marker, so cut at least 9.)
	for _, n := range []int{4, 8, len(good) / 2, len(good) - 9} {
		if _, err := DecodeTokenBatch(good[:n]); !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTruncated) {
			t.Errorf("truncated at %d: %v", n, err)
		}
	}
	// The record-batch message declares 2 GiB of metadata: arrow-go's
	// ipc.NewReader would allocate it; we must refuse it cheaply.
	n1 := int(binary.LittleEndian.Uint32(good[4:8]))
	bomb := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(bomb[8+n1+4:], 0x7ffffff0)
	if _, err := DecodeTokenBatch(bomb); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "exceeds limit") {
		t.Errorf("metadata length bomb: %v", err)
	}
	// A schema whose fields vector claims 2^30 entries.
	fbomb := append([]byte(nil), good...)
	meta := fbuf(fbomb[8 : 8+n1])
	root, _ := meta.u32(0)
	msg, err := meta.table(root)
	if err != nil {
		t.Fatal(err)
	}
	sp, _ := msg.ref(2)
	schema, err := meta.table(sp)
	if err != nil {
		t.Fatal(err)
	}
	fv, _ := schema.ref(1)
	if n, _ := meta.u32(fv); n != 10 { // 8 core columns + routes + support
		t.Fatalf("fields vector at %d holds %d, want 10", fv, n)
	}
	binary.LittleEndian.PutUint32(meta[fv:], 1<<30)
	if _, err := DecodeTokenBatch(fbomb); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "vector") {
		t.Errorf("fields vector bomb: %v", err)
	}
	if _, err := DecodeTokenBatch([]byte("not arrow at all, just some text")); !errors.Is(err, ErrMalformed) {
		t.Errorf("garbage: %v", err)
	}
	// A valid Arrow stream with another schema is rejected.
	other := *tb
	other.Routes = nil
	ob, err := EncodeTokenBatch(&other)
	if err != nil {
		t.Fatal(err)
	}
	swapped := strings.Replace(string(ob), ColTokenID, "token_xx", 1)
	if _, err := DecodeTokenBatch([]byte(swapped)); !errors.Is(err, ErrMalformed) {
		t.Errorf("renamed column: %v", err)
	}
	// Metadata dtype that disagrees with num_experts.
	bad := strings.Replace(string(good), "uint8", "int32", 1)
	if _, err := DecodeTokenBatch([]byte(bad)); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "dtype") {
		t.Errorf("dtype mismatch: %v", err)
	}
}

func mustEncodeBatch(t testing.TB, tb *TokenBatch) []byte {
	t.Helper()
	b, err := EncodeTokenBatch(tb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
