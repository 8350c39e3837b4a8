package delta

import "errors"

// Sentinel errors; every error from this package wraps one of them (or a
// store or I/O error) and names the version, file or tensor at fault.
var (
	// ErrManifest: manifest.json is malformed or inconsistent.
	ErrManifest = errors.New("delta: bad manifest")
	// ErrChecksum: a patched tensor's checksum does not match the manifest.
	ErrChecksum = errors.New("delta: checksum mismatch")
	// ErrCorrupt: a payload is missing, truncated or does not decompress to
	// the declared size.
	ErrCorrupt = errors.New("delta: corrupt payload")
	// ErrMismatch: the checkpoints (or a checkpoint and a manifest) do not
	// have the same tensors, shapes or dtypes.
	ErrMismatch = errors.New("delta: checkpoint mismatch")
	// ErrChain: a manifest's version or base_version does not follow the
	// version it is applied to.
	ErrChain = errors.New("delta: version chain broken")
	// ErrNoVersion: the requested version is not committed in the store.
	ErrNoVersion = errors.New("delta: version not found")
)
