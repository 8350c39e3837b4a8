// Package shm is the data plane for peers on one host: the source copies the
// published ranges into a file under /dev/shm (tmpfs: RAM, no disk), the
// plan's URI names that file, and each destination reads the ranges into
// its sink — two memory copies, no sockets. pwrite/pread rather than mmap:
// a fresh mapping takes one page fault (and, for the writer, one zeroed
// page) per 4 KiB, while pread/pwrite copy between the page cache and the
// caller's memory in one pass.
//
// # Contract
//
//   - Publish creates Dir/asyncrl-dp-<id>-<random> sized to the end of the
//     last range, copies every range into it (Config.Workers in parallel)
//     and returns an Offer with URI shm://<path>. Closing the Offer makes
//     the URI stop resolving: the file is unlinked, or — up to
//     Config.KeepFiles of them — renamed and kept for the next Publish to
//     overwrite (same-size weights every version: no page allocation).
//     Backend.Close unlinks kept files. A destination still reading a
//     closed offer's file may then see new bytes; its checksums catch that.
//   - Fetch accepts shm://<path> and file://<path> URIs (any file works, so
//     a checkpoint on local disk can be "published" by its path), reads each
//     range into the sink at its offset (straight into its memory for a
//     dataplane.Slicer, through one buffer per worker otherwise) and
//     verifies the range checksum over those bytes, chunk by chunk while
//     they are in cache. A missing file is dataplane.ErrUnknownTransfer; a file
//     shorter than the plan is dataplane.ErrBadPlan.
//   - Available fails with dataplane.ErrUnavailable when Dir is not a
//     writable directory (containers without /dev/shm), so the registry
//     falls back to TCP.
//   - Any file system works; only tmpfs keeps the bytes off disk.
package shm
