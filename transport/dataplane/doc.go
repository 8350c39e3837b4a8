// Package dataplane moves bulk bytes — weights, packed token batches —
// between processes, after a control message (messages.TransferPlan) said
// what to move and where the bytes are.
//
// # Contract
//
//   - A transfer is a messages.TransferPlan: TransferID, Source, Destinations,
//     and Ranges. Each range is a slice [Offset, Offset+Length) of one flat
//     byte space (the source's io.ReaderAt); the receiver writes it at the
//     same offset of its io.WriterAt. Range.Name is informational (the tensor
//     or file the bytes belong to). Range.Checksum is "xxh3:<16 hex>" or
//     "crc32c:<8 hex>" (see Sum); an empty checksum is not verified. Ranges
//     must not overlap (ValidateRanges).
//   - A Backend is pull-shaped, like a sharded NIXL read: the source calls
//     Publish, which makes the bytes reachable and returns an Offer whose URI
//     goes into the plan (plan.URI: "tcp://host:port/<id>", "shm:///dev/shm/…");
//     each destination calls Fetch with the plan, which fills its sink and
//     verifies every range checksum before returning. The source keeps the
//     Offer open until every destination reported TransferDone or
//     TransferFailed, then closes it. A source must not change the bytes
//     while they are published.
//   - Fetch returns a Result (bytes, reconnects) or an error wrapping
//     ErrChecksum, ErrIncomplete, ErrUnavailable, ErrUnknownTransfer or
//     ErrBadPlan; a *RangeError names the failing range. DoneMessage and
//     FailedMessage turn either outcome into the control message to publish.
//   - Instrument wraps any Backend with Prometheus metrics
//     (asyncrl_dataplane_*: fetches by outcome, bytes, reconnects, duration,
//     open offers) on a caller-provided registerer.
//   - Backends that cannot run on this host (no GPU, no libnccl) say so in
//     Available with an error wrapping ErrUnavailable; Registry.Pick walks a
//     preference list and falls back to TCP, reporting why it skipped each.
//     The source picks; a destination follows the plan's URI scheme
//     (Registry.ForURI), and Registry.Receive does a destination's whole
//     step: fetch, then the TransferDone or TransferFailed to publish.
//
// Tests: the two-process acceptance tests (twoproc_test.go) move 16 MiB by
// default and 1 GiB with ASYNCRL_DATAPLANE_1GIB=1; the benchmarks move
// 64 MiB, or ASYNCRL_DATAPLANE_BENCH_BYTES. bench/gpu/check.sh runs the GPU
// checks on a GPU host.
//
// Subpackages: tcp (parallel resumable streams, sendfile), shm (/dev/shm
// files mapped on both sides), nccl and nixl (libraries loaded at run time
// with purego; transfers are the next step), and plan (a pure planner that
// maps trainer shards onto inference shards).
package dataplane
