// Package delta is the SkyRL-compatible delta weight-sync codec: it turns
// two checkpoints into a delta version that SkyRL's receiver can read, and
// reads SkyRL's (reference/skyrl.md "Delta weight sync").
//
// # Format
//
// A version lives under <sync_dir>/delta-{version:08d}/ (a store key
// prefix). Versions start at 0, the base checkpoint, which is never a
// delta; each publish is base_version+1, and an unchanged publish still
// advances, with empty "tensors" and "payload_files". For each tensor the
// new bytes are cast to the base checkpoint's dtype, XORed with the bytes
// previously published, and the patch is compressed as one zstd frame
// (klauspost/compress; the frame records its content size so Python's
// zstandard.decompress reads it, and has no zstd checksum: the manifest's
// xxh3-128 covers the tensor); tensors with no changed byte are omitted.
// The patches are uint8 tensors, keyed by payload_key (asyncrl uses the
// tensor name), in safetensors payload files named
// delta-rank{r:05d}-file{i:06d}.safetensors, rolled over when the next
// patch would push a file past max_file_size_in_gb of compressed bytes.
// manifest.json (Manifest, field for field as the reference lists them) is
// written last with Store.Commit: its presence commits the version. As in
// SkyRL, dtype is the torch name without its prefix ("bfloat16"; "BF16"
// and "torch.bfloat16" are read too), payload_key is the tensor name, zstd
// level 1 and 1 GiB payload files are the defaults, and an older record
// with a "sha256" field instead of checksum/checksum_algorithm is read.
//
// Full checkpoints (full-{v:08d}/) and LoRA adapters (lora-{v:08d}/) are
// asyncrl's own snapshot versions: whole files, each with its size and
// xxh3-128 checksum in a manifest.json written last (PublishSnapshot,
// FetchSnapshot). Publisher numbers delta versions, resumes after the
// newest one, and adds a full checkpoint every FullEvery versions.
//
// Checksums are of the NEW tensor bytes: "xxh3-128" as python-xxhash's
// hexdigest prints it (canonical big-endian, high 64 bits then low, 32 hex
// digits; see XXH3Hex) by default; "sha256" is accepted on read and can be
// written.
//
// # Memory and parallelism
//
// Encode reads tensors one at a time from its two Sources (a checkpoint
// directory streams from disk) with a bounded pool of workers and keeps the
// output order deterministic; the payload file being filled is the only
// thing that grows, bounded by MaxFileSizeGB. Apply patches a Mutable
// checkpoint in place (each tensor at its offset in its shard), tensors in
// parallel, verifying each tensor's checksum before writing it back. The
// per-tensor scratch buffers (compressed patch, current bytes) are
// recycled through a pool rather than allocated, zeroed and collected for
// every tensor. Encode never materialises a tensor's XOR patch: it XORs
// 256 KiB chunks straight into a stream encoder (patchenc.go), which made
// the old XOR-to-a-tensor-sized-buffer step (a pass out to memory and back,
// page faults on a fresh buffer) disappear; what is left is mostly zstd:
// per CPU-second Encode runs at 0.8–1.2× C zstd -1 on sparse BF16 updates
// (1–3 % of weights), ~1.5× on FP8 ones, and ~0.5× on dense Adam-like
// ones, where klauspost's entropy coding is the gap (BENCHMARKS.md "Delta
// codec vs C zstd", bench/zstd.sh). Any zstd decoder reads the frames;
// they are deterministic for a given level, not byte-identical to other
// encoders'.
//
// # Errors
//
// ErrManifest, ErrChecksum, ErrCorrupt, ErrMismatch, ErrChain and
// ErrNoVersion, wrapped with the version and tensor at fault.
package delta
