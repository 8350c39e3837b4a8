// Package shm is the data plane for peers on one host: the source copies the
// published ranges into a file under /dev/shm (tmpfs: RAM, no disk), the
// plan's URI names that file, and each destination maps it read-only and
// copies the ranges into its sink — two memmoves, no sockets, no kernel
// copies per byte beyond the page-table work of mmap.
//
// # Contract
//
//   - Publish creates Dir/asyncrl-dp-<id>-<random> sized to the end of the
//     last range, copies every range into it (Config.Workers in parallel)
//     and returns an Offer with URI shm://<path>. Closing the Offer unlinks
//     the file; destinations that already mapped it keep their mapping.
//   - Fetch accepts shm://<path> and file://<path> URIs (any file works, so
//     a checkpoint on local disk can be "published" by its path), maps the
//     file, copies each range to the sink at its offset and verifies the
//     range checksum over the bytes the sink received (for a
//     dataplane.Slicer sink) or over the mapped bytes it wrote (any other
//     io.WriterAt). A missing file is dataplane.ErrUnknownTransfer; a file
//     shorter than the plan is dataplane.ErrBadPlan.
//   - Available fails with dataplane.ErrUnavailable when Dir is not a
//     writable directory (containers without /dev/shm), so the registry
//     falls back to TCP.
//   - Linux only (mmap of a shared file).
package shm
