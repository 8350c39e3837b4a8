// Package data is the SFT data path: datasets of pretokenized shards
// (Arrow IPC opened memory-mapped, Parquet, JSONL), their cached index,
// chunked validation that names the file and row of bad rows, samplers
// (sequential, shuffled, block-shuffled, weighted mixture, or the
// caller's) whose state
// restores exactly, and packing of examples into token-budget bins over
// the microbatch core's packers.
//
// Contract: Open/OpenWith give a Stream that yields examples in the
// sampler's order; State/Restore resume it exactly over the same
// datasets (ErrBadState otherwise). The samplers, Perm and Pack are pure:
// randomness comes from the seed, no clock, no I/O. A bad row is an error
// naming its file and row (*RowError); a shard that cannot be read is
// ErrCorrupt naming the file. Memory stays flat in the dataset's size:
// Arrow rows are read with pread at the offsets the mapped layout gives,
// or, under a windowed sampler (block_shuffle), through the mapping with
// the pages dropped each time the window changes, so RSS holds at most
// one window (docs/sft.md, "Data"; BENCHMARKS.md, "SFT data path").
package data
