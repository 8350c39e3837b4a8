// Package store holds weight versions (delta payloads, manifests, full
// checkpoints) in an object store behind one small interface, so the
// publisher and the engines' receivers work the same way whether versions
// live in a shared directory (local disk or NFS), an S3-compatible bucket
// (minio-go) or a NATS JetStream Object Store.
//
// # Contract
//
// Keys are slash-separated relative paths ("delta-00000003/manifest.json"):
// no empty segment, no "." or ".." segment, no leading slash, no segment
// starting with ".tmp-" (reserved for the local store's temporary files).
//
//   - Put stores an object atomically: a reader (Get, List) sees either the
//     old object, nothing, or the complete new one, never a prefix of it. A
//     Get that races an overwrite of the same key may fail (the NATS store
//     purges the old chunks under it) but never returns torn bytes; the
//     weight layout writes every object once, so this only matters for
//     retried writes. Empty objects are not portable (some S3 servers refuse
//     them) and the weight layout never writes one.
//   - Get returns ErrNotFound (wrapped) for a missing key.
//   - List returns every key that starts with prefix, sorted.
//   - Delete of a missing key is not an error.
//   - Commit is Put plus a durability barrier: every object Put before it
//     is durable before the committed object becomes visible. Writers use it
//     for manifests, whose presence commits a version, so a crash between
//     payloads and manifest leaves the version invisible.
//
// Every implementation passes the same conformance suite (storetest.Run).
// Retrying wraps any Store with bounded retries and exponential backoff (the
// sleep is injected, so tests do not wait); PutFiles and GetFiles move many
// objects with a bounded number of parallel workers.
package store
