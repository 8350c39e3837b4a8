package messages

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Column names and schema metadata keys of the token-batch Arrow schema
// (documented in doc.go). Never rename one: Python workers read them by name.
const (
	ColTrajectoryID  = "trajectory_id"
	ColGroupID       = "group_id"
	ColReward        = "reward"
	ColPromptLen     = "prompt_len"
	ColTokenID       = "token_id"
	ColLogprob       = "logprob"
	ColLossMask      = "loss_mask"
	ColPolicyVersion = "policy_version"
	ColTokenReward   = "token_reward"
	ColRoutedExperts = "routed_experts"
	ColSampleSupport = "sample_support"

	MetaSchemaVersion = "asyncrl.token_batch.version"
	MetaVocabSize     = "asyncrl.vocab_size"
	MetaRouteLayers   = "asyncrl.routed_experts.layers"
	MetaRouteTopK     = "asyncrl.routed_experts.top_k"
	MetaNumExperts    = "asyncrl.routed_experts.num_experts"
	MetaRouteDType    = "asyncrl.routed_experts.dtype"
	MetaSupportK      = "asyncrl.sample_support.k"

	// TokenBatchSchemaVersion is written under MetaSchemaVersion.
	TokenBatchSchemaVersion = "1"
	// DefaultMaxTokenBatchBytes bounds DecodeTokenBatch input.
	DefaultMaxTokenBatchBytes = 1 << 30
)

func expertArrowType(d ExpertDType) arrow.DataType {
	switch d {
	case ExpertUint8:
		return arrow.PrimitiveTypes.Uint8
	case ExpertInt16:
		return arrow.PrimitiveTypes.Int16
	default:
		return arrow.PrimitiveTypes.Int32
	}
}

// schemas caches tokenBatchSchema: every encode and decode needs one, and
// building it costs dozens of allocations. Schemas are immutable; the cache
// is bounded because decoded specs come from the input.
var schemas struct {
	sync.Mutex
	m map[BatchSpec]*arrow.Schema
}

const maxCachedSchemas = 64

// tokenBatchSchema is the exact schema for a spec; decoding compares against it.
func tokenBatchSchema(s BatchSpec) *arrow.Schema {
	schemas.Lock()
	sc, ok := schemas.m[s]
	schemas.Unlock()
	if ok {
		return sc
	}
	sc = newTokenBatchSchema(s)
	schemas.Lock()
	if schemas.m == nil {
		schemas.m = map[BatchSpec]*arrow.Schema{}
	}
	if len(schemas.m) < maxCachedSchemas {
		schemas.m[s] = sc
	}
	schemas.Unlock()
	return sc
}

func newTokenBatchSchema(s BatchSpec) *arrow.Schema {
	keys := []string{MetaSchemaVersion}
	vals := []string{TokenBatchSchemaVersion}
	add := func(k string, v int32) {
		keys = append(keys, k)
		vals = append(vals, strconv.FormatInt(int64(v), 10))
	}
	fields := []arrow.Field{
		{Name: ColTrajectoryID, Type: arrow.BinaryTypes.String},
		{Name: ColGroupID, Type: arrow.BinaryTypes.String},
		{Name: ColReward, Type: arrow.PrimitiveTypes.Float32},
		{Name: ColPromptLen, Type: arrow.PrimitiveTypes.Int32},
		{Name: ColTokenID, Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)},
		{Name: ColLogprob, Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Float32)},
		{Name: ColLossMask, Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Uint8)},
		{Name: ColPolicyVersion, Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)},
	}
	if s.Vocab > 0 {
		add(MetaVocabSize, s.Vocab)
	}
	if s.TokenRewards {
		fields = append(fields, arrow.Field{Name: ColTokenReward, Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Float32)})
	}
	if s.NumExperts > 0 {
		d := ExpertDTypeFor(s.NumExperts)
		fields = append(fields, arrow.Field{Name: ColRoutedExperts, Type: arrow.ListOfNonNullable(
			arrow.FixedSizeListOfNonNullable(s.RouteLayers*s.RouteTopK, expertArrowType(d)))})
		add(MetaRouteLayers, s.RouteLayers)
		add(MetaRouteTopK, s.RouteTopK)
		add(MetaNumExperts, s.NumExperts)
		keys = append(keys, MetaRouteDType)
		vals = append(vals, d.String())
	}
	if s.SupportK > 0 {
		fields = append(fields, arrow.Field{Name: ColSampleSupport, Type: arrow.ListOfNonNullable(
			arrow.FixedSizeListOfNonNullable(s.SupportK, arrow.PrimitiveTypes.Int32))})
		add(MetaSupportK, s.SupportK)
	}
	md := arrow.NewMetadata(keys, vals)
	return arrow.NewSchema(fields, &md)
}

// EncodeTokenBatch validates b and writes it as an Arrow IPC stream holding
// the schema and exactly one record batch (one row per trajectory). Column
// buffers alias b's slices, so the encode copies each value once, into the output.
func EncodeTokenBatch(b *TokenBatch) ([]byte, error) {
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("messages: encode token batch: %w", err)
	}
	spec := b.Spec()
	schema := tokenBatchSchema(spec)
	B := b.Len()
	offs := memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(b.Offsets))
	list := func(child arrow.ArrayData, elem arrow.DataType) arrow.Array {
		d := array.NewData(arrow.ListOfNonNullable(elem), B, []*memory.Buffer{nil, offs}, []arrow.ArrayData{child}, 0, 0)
		defer d.Release()
		return array.MakeFromData(d)
	}
	prim := func(t arrow.DataType, n int, raw []byte) arrow.ArrayData {
		return array.NewData(t, n, []*memory.Buffer{nil, memory.NewBufferBytes(raw)}, nil, 0, 0)
	}
	fsl := func(child arrow.ArrayData, n int32, elem arrow.DataType) arrow.ArrayData {
		return array.NewData(arrow.FixedSizeListOfNonNullable(n, elem), b.NumTokens(), []*memory.Buffer{nil}, []arrow.ArrayData{child}, 0, 0)
	}
	T := b.NumTokens()
	cols := []arrow.Array{
		stringArray(b.TrajectoryIDs),
		stringArray(b.GroupIDs),
		array.MakeFromData(prim(arrow.PrimitiveTypes.Float32, B, arrow.Float32Traits.CastToBytes(b.Rewards))),
		array.MakeFromData(prim(arrow.PrimitiveTypes.Int32, B, arrow.Int32Traits.CastToBytes(b.PromptLens))),
		list(prim(arrow.PrimitiveTypes.Int32, T, arrow.Int32Traits.CastToBytes(b.TokenIDs)), arrow.PrimitiveTypes.Int32),
		list(prim(arrow.PrimitiveTypes.Float32, T, arrow.Float32Traits.CastToBytes(b.Logprobs)), arrow.PrimitiveTypes.Float32),
		list(prim(arrow.PrimitiveTypes.Uint8, T, b.LossMask), arrow.PrimitiveTypes.Uint8),
		list(prim(arrow.PrimitiveTypes.Int32, T, arrow.Int32Traits.CastToBytes(b.PolicyVersions)), arrow.PrimitiveTypes.Int32),
	}
	if b.TokenRewards != nil {
		cols = append(cols, list(prim(arrow.PrimitiveTypes.Float32, T, arrow.Float32Traits.CastToBytes(b.TokenRewards)), arrow.PrimitiveTypes.Float32))
	}
	if r := b.Routes; r != nil {
		et := expertArrowType(r.DType)
		n := int32(r.Stride())
		cols = append(cols, list(fsl(prim(et, T*int(n), r.Data), n, et), arrow.FixedSizeListOfNonNullable(n, et)))
	}
	if s := b.Support; s != nil {
		cols = append(cols, list(fsl(prim(arrow.PrimitiveTypes.Int32, T*int(s.K), arrow.Int32Traits.CastToBytes(s.Values)), s.K, arrow.PrimitiveTypes.Int32),
			arrow.FixedSizeListOfNonNullable(s.K, arrow.PrimitiveTypes.Int32)))
	}
	rec := array.NewRecordBatch(schema, cols, int64(B))
	for _, c := range cols {
		c.Release()
	}
	defer rec.Release()

	// One allocation for the whole stream: buffers (8-byte padded) plus
	// schema and flatbuffer metadata, an upper bound.
	size := 4096 + 8*len(cols)*3 + 4*len(b.Offsets)*len(cols) + 4*B + 13*T
	for _, id := range b.TrajectoryIDs {
		size += len(id)
	}
	for _, id := range b.GroupIDs {
		size += len(id)
	}
	if b.TokenRewards != nil {
		size += 4 * T
	}
	if b.Routes != nil {
		size += len(b.Routes.Data)
	}
	if b.Support != nil {
		size += 4 * len(b.Support.Values)
	}
	// A small batch (a group's, typically) is written into a pooled buffer
	// and copied out at its exact size: the bound is loose for small
	// batches (4 KiB of it is for metadata) and the result may live long.
	// A large one is written in place.
	var out *bytes.Buffer
	if size <= maxPooledBatchBuf {
		out = batchBufs.Get().(*bytes.Buffer)
		defer batchBufs.Put(out)
		out.Reset()
	} else {
		out = new(bytes.Buffer)
	}
	out.Grow(size)
	w := ipc.NewWriter(out, ipc.WithSchema(schema))
	if err := w.Write(rec); err != nil {
		return nil, fmt.Errorf("messages: encode token batch: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("messages: encode token batch: %w", err)
	}
	if size <= maxPooledBatchBuf {
		return bytes.Clone(out.Bytes()), nil
	}
	return out.Bytes(), nil
}

// batchBufs holds the buffers small token batches are encoded into.
var batchBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBatchBuf = 256 << 10

func stringArray(v []string) arrow.Array {
	bld := array.NewStringBuilder(memory.DefaultAllocator)
	defer bld.Release()
	bld.AppendValues(v, nil)
	return bld.NewArray()
}

// errAllocLimit is what the budget allocator panics with; decode's recover
// turns it into ErrTooLarge.
var errAllocLimit = errors.New("allocation budget exceeded")

// budgetAllocator refuses to hand out more than limit bytes in total: IPC
// metadata can declare huge (compressed) buffer sizes, and a failed huge
// allocation is a fatal runtime error, not a recoverable panic.
type budgetAllocator struct {
	mem   memory.Allocator
	used  atomic.Int64
	limit int64
}

func (a *budgetAllocator) Allocate(n int) []byte {
	if n < 0 || a.used.Add(int64(n)) > a.limit {
		panic(errAllocLimit)
	}
	return a.mem.Allocate(n)
}

func (a *budgetAllocator) Reallocate(n int, b []byte) []byte {
	if n < 0 || a.used.Add(int64(n-len(b))) > a.limit {
		panic(errAllocLimit)
	}
	return a.mem.Reallocate(n, b)
}

func (a *budgetAllocator) Free(b []byte) {
	a.used.Add(-int64(len(b)))
	a.mem.Free(b)
}

// DecodeTokenBatch decodes an Arrow IPC stream written by EncodeTokenBatch
// (or by pyarrow with the documented schema), inputs up to
// DefaultMaxTokenBatchBytes.
func DecodeTokenBatch(data []byte) (*TokenBatch, error) {
	return DecodeTokenBatchLimit(data, DefaultMaxTokenBatchBytes)
}

// DecodeTokenBatchLimit is DecodeTokenBatch with an explicit input size
// limit. The result owns its memory (nothing aliases data) and has passed
// Validate. Every failure wraps ErrMalformed, ErrTruncated or ErrTooLarge;
// hostile input never panics.
func DecodeTokenBatchLimit(data []byte, maxBytes int) (tb *TokenBatch, err error) {
	if len(data) > maxBytes {
		return nil, fmt.Errorf("%w: token batch: %d bytes > limit %d", ErrTooLarge, len(data), maxBytes)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: token batch: empty input", ErrTruncated)
	}
	// Arrow's reader trusts lengths in the flatbuffer metadata and can panic;
	// validation below runs before any typed access, and this recover is the
	// last line of defence.
	defer func() {
		if r := recover(); r != nil {
			tb = nil
			if e, ok := r.(error); ok && errors.Is(e, errAllocLimit) {
				err = fmt.Errorf("%w: token batch: %v", ErrTooLarge, e)
				return
			}
			err = fmt.Errorf("%w: token batch: arrow reader panic: %v", ErrMalformed, r)
		}
	}()
	if err := checkStream(data); err != nil {
		return nil, err
	}
	mem := &budgetAllocator{mem: memory.NewGoAllocator(), limit: 2*int64(len(data)) + 1<<16}
	opts := []ipc.Option{
		ipc.WithAllocator(mem),
		ipc.WithBodySizeLimit(int64(len(data))),
		ipc.WithMetadataSizeLimit(min(int64(len(data)), 1<<20)),
	}
	// ipc.NewReader (arrow-go v18.8.0) does not pass the size limits on to its
	// message reader, so a declared 2 GiB metadata length is allocated as is;
	// building the message reader ourselves applies them.
	rdr, err := ipc.NewReaderFromMessageReader(ipc.NewMessageReader(bytes.NewReader(data), opts...), opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: token batch: %v", ErrMalformed, err)
	}
	defer rdr.Release()
	spec, err := specFromSchema(rdr.Schema())
	if err != nil {
		return nil, err
	}
	cols, err := columnIndex(rdr.Schema(), tokenBatchSchema(spec))
	if err != nil {
		return nil, err
	}
	if !rdr.Next() {
		if rdr.Err() != nil {
			return nil, fmt.Errorf("%w: token batch: %v", ErrMalformed, rdr.Err())
		}
		return nil, fmt.Errorf("%w: token batch: stream has no record batch", ErrTruncated)
	}
	rec := rdr.RecordBatch()
	rec.Retain()
	defer rec.Release()
	if rdr.Next() {
		return nil, malformed("stream has more than one record batch")
	}
	if rdr.Err() != nil {
		return nil, fmt.Errorf("%w: token batch: %v", ErrMalformed, rdr.Err())
	}
	return fromRecord(rec, spec, cols)
}

func metaInt(md arrow.Metadata, key string, lo, hi int64) (int32, bool, error) {
	i := md.FindKey(key)
	if i < 0 {
		return 0, false, nil
	}
	v, err := strconv.ParseInt(md.Values()[i], 10, 32)
	if err != nil || v < lo || v > hi {
		return 0, true, malformed("metadata %s=%q: want an integer in [%d, %d]", key, md.Values()[i], lo, hi)
	}
	return int32(v), true, nil
}

// specFromSchema reads the optional columns and shapes from the metadata and
// checks the column set agrees with it.
func specFromSchema(s *arrow.Schema) (BatchSpec, error) {
	var spec BatchSpec
	md := s.Metadata()
	if i := md.FindKey(MetaSchemaVersion); i < 0 || md.Values()[i] != TokenBatchSchemaVersion {
		return spec, malformed("metadata %s missing or not %q", MetaSchemaVersion, TokenBatchSchemaVersion)
	}
	var err error
	if spec.Vocab, _, err = metaInt(md, MetaVocabSize, 1, 1<<31-1); err != nil {
		return spec, err
	}
	spec.TokenRewards = s.HasField(ColTokenReward)
	var okL, okK, okE bool
	if spec.RouteLayers, okL, err = metaInt(md, MetaRouteLayers, 1, maxRouteLayers); err != nil {
		return spec, err
	}
	if spec.RouteTopK, okK, err = metaInt(md, MetaRouteTopK, 1, maxRouteTopK); err != nil {
		return spec, err
	}
	if spec.NumExperts, okE, err = metaInt(md, MetaNumExperts, 1, 1<<31-1); err != nil {
		return spec, err
	}
	hasRoutes := s.HasField(ColRoutedExperts)
	if okL != hasRoutes || okK != hasRoutes || okE != hasRoutes {
		return spec, malformed("column %s present=%v but route metadata layers=%v top_k=%v num_experts=%v",
			ColRoutedExperts, hasRoutes, okL, okK, okE)
	}
	if hasRoutes {
		i := md.FindKey(MetaRouteDType)
		if i < 0 {
			return spec, malformed("metadata %s missing", MetaRouteDType)
		}
		d, ok := parseExpertDType(md.Values()[i])
		if !ok || d != ExpertDTypeFor(spec.NumExperts) {
			return spec, malformed("metadata %s=%q: want %s for %d experts", MetaRouteDType, md.Values()[i], ExpertDTypeFor(spec.NumExperts), spec.NumExperts)
		}
	}
	var okS bool
	if spec.SupportK, okS, err = metaInt(md, MetaSupportK, 1, maxSupportK); err != nil {
		return spec, err
	}
	if okS != s.HasField(ColSampleSupport) {
		return spec, malformed("column %s present=%v but metadata %s present=%v", ColSampleSupport, s.HasField(ColSampleSupport), MetaSupportK, okS)
	}
	return spec, nil
}
