package config

import "time"

// PublisherConfig configures the weight publisher that ships each new policy
// version to the engines.
type PublisherConfig struct {
	// Mode is the shipping format.
	Mode PublishMode `yaml:"mode" doc:"weight format: delta (SkyRL XOR+zstd), full or lora"`
	// SyncDir holds published versions (delta-00000001/ …); empty =
	// <run.data_dir>/weights.
	SyncDir string `yaml:"sync_dir" doc:"directory of published versions; empty = <run.data_dir>/weights"`
	// ZstdLevel is the delta compression level (zstd's 1–22 scale). SkyRL
	// compresses with level 1; 3 (the default before issue 15) is still
	// allowed and buys a slightly smaller delta for more CPU.
	ZstdLevel int `yaml:"zstd_level" doc:"zstd compression level of delta patches (1–22; SkyRL: 1)"`
	// MaxFileSizeGB rolls payload files over at this many compressed GB
	// (SkyRL's max_file_size_in_gb, default 1; 5 before issue 15).
	MaxFileSizeGB float64 `yaml:"max_file_size_gb" doc:"payload files roll over at this many compressed GB (SkyRL max_file_size_in_gb: 1)"`
	// FullCheckpointEvery also writes a full checkpoint every N versions so a
	// receiver that lost its state resyncs without replaying every delta
	// (0 = only the base).
	FullCheckpointEvery int `yaml:"full_checkpoint_every" doc:"also write a full checkpoint every N versions (0 = never), so receivers resync without replaying every delta"`
	// Transport is how versions reach the engines: through Store (each
	// engine's receiver fetches and replays the deltas), or in memory over
	// the TCP data plane (each version's full serving checkpoint, checksummed
	// per range, pulled by every engine's agent; no store is written). The
	// data plane needs mode delta's tracked, acknowledged path.
	Transport PublishTransport `yaml:"transport" doc:"how versions reach engines: store (deltas via publisher.store) or dataplane (full checkpoint bytes in memory over TCP, checksummed; needs mode delta)"`
	// Store is where versions live.
	Store WeightStore `yaml:"store" doc:"where versions live: local directory, s3 bucket, or nats object store"`
	// S3Endpoint is the S3 API endpoint (store: s3), e.g. https://s3.amazonaws.com.
	S3Endpoint string `yaml:"s3_endpoint" doc:"S3 API endpoint when store is s3; empty = AWS"`
	// S3Bucket is the bucket (required for store: s3).
	S3Bucket string `yaml:"s3_bucket" doc:"S3 bucket when store is s3 (required then)"`
	// Quantize quantises every published version's linear weights for the
	// engines (weights/quant): fp8 is block-wise E4M3 with an FP32 scale
	// per 128×128 block (vLLM quant_method fp8), mxfp8 E4M3 with an E8M0
	// scale per 32 elements of a row (vLLM ModelOpt MXFP8). The trainer
	// keeps its float32 masters; version 0 and every later version are the
	// quantised checkpoint, so deltas are XOR over the quantised bytes.
	// Needs mode delta.
	Quantize Quantization `yaml:"quantize" doc:"quantise published weights: none, fp8 (E4M3, FP32 scale per 128x128 block) or mxfp8 (E4M3, E8M0 scale per 32); the trainer keeps float32 masters; needs mode delta"`
	// Attempts is how many times the trainer tries a version's publish
	// in all before the run ends on its failure. A failed publish (every
	// engine briefly unreachable, a store write cut by a bus reconnect,
	// a remote trainer's ack that did not come) is tried again with the
	// same weights — the step is never trained twice — after
	// RetryBackoff, doubling each try up to a minute. A try fails fast in
	// process (the engines refuse), but a remote worker's try lasts its
	// whole ack wait (60 s): with the defaults an in-process run gives up
	// about a minute after the first failure, a remote worker about 7
	// minutes after (6 × 60 s + 62 s). Meanwhile the node also tries the
	// worker's version again on the worker's repeated announcements,
	// RetryBackoff apart, doubling, so an engine that is back takes it
	// within the same backoff either way.
	Attempts int `yaml:"attempts" doc:"tries of a version's publish before the run ends on its failure (1 = end at the first failure)"`
	// RetryBackoff is the wait after the first failed try.
	RetryBackoff time.Duration `yaml:"retry_backoff" doc:"wait after a failed publish before it is tried again; doubles each try, up to 1m"`
}

// Quantization is the weight format published to the engines.
type Quantization string

// Quantizations.
const (
	QuantizeNone  Quantization = "none"  // BF16 serving checkpoints
	QuantizeFP8   Quantization = "fp8"   // block-wise FP8 E4M3, 128×128 FP32 scales
	QuantizeMXFP8 Quantization = "mxfp8" // OCP MXFP8: E4M3, E8M0 scale per 32 elements
)

// Values lists the quantizations.
func (Quantization) Values() []string { return []string{"none", "fp8", "mxfp8"} }

// DefaultPublisher ships SkyRL-format deltas to a local directory: real
// updates change ~1–3% of the weights, so deltas are far smaller than full
// copies. zstd level 1 and 1 GB payload files are SkyRL's own run defaults
// (DeltaCheckpointPublisher: compress_bytes(level=1), max_file_size_in_gb
// 1.0); level 1 costs little ratio on the sparse XOR patches (BENCHMARKS.md,
// delta encode by zstd level).
func DefaultPublisher() PublisherConfig {
	return PublisherConfig{
		Mode:                PublishDelta,
		ZstdLevel:           1,
		MaxFileSizeGB:       1,
		FullCheckpointEvery: 50,
		Store:               StoreLocal,
		Transport:           TransportStore,
		Quantize:            QuantizeNone,
		// 2+4+8+16+32 s: a publish that keeps failing ends the run about
		// a minute after its first failure (a remote worker's, whose
		// every try waits out its 60 s ack, about 7 minutes).
		Attempts:     6,
		RetryBackoff: 2 * time.Second,
	}
}

// Validate checks the publisher section.
func (c PublisherConfig) Validate() error {
	v := checker{section: "publisher"}
	v.checkEnums(c)
	if c.ZstdLevel < 1 || c.ZstdLevel > 22 {
		v.fail("zstd_level", "must be in [1, 22], got %d", c.ZstdLevel)
	}
	v.positiveFloat("max_file_size_gb", c.MaxFileSizeGB)
	v.atLeast("full_checkpoint_every", int64(c.FullCheckpointEvery), 0)
	if c.Transport == TransportDataPlane && c.Mode != PublishDelta {
		v.fail("transport", "dataplane needs mode delta (the acknowledged per-engine path), got mode %s", c.Mode)
	}
	if c.Quantize != QuantizeNone && c.Mode != PublishDelta {
		v.fail("quantize", "%s needs mode delta (the quantised checkpoints are what the engines load), got mode %s", c.Quantize, c.Mode)
	}
	v.atLeast("attempts", int64(c.Attempts), 1)
	v.positiveDuration("retry_backoff", c.RetryBackoff)
	if c.Store == StoreS3 && c.S3Bucket == "" {
		v.fail("s3_bucket", "must be set when store is s3")
	}
	return v.err()
}

// PublishTransport is how published versions reach the engines.
type PublishTransport string

// Publish transports.
const (
	TransportStore     PublishTransport = "store"     // deltas written to publisher.store, fetched by receivers
	TransportDataPlane PublishTransport = "dataplane" // full checkpoint bytes pulled in memory over TCP
)

// Values lists the publish transports.
func (PublishTransport) Values() []string { return []string{"store", "dataplane"} }
