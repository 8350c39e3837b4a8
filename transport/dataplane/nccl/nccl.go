// Package nccl is the NCCL data plane, loaded at run time: libnccl.so.2 is
// dlopened with purego (no cgo, no build-time CUDA), and ncclGetVersion
// proves the load. On a host without the library — every CPU-only host —
// Available reports dataplane.ErrUnavailable with the dlopen error, and
// dataplane.Registry.Pick falls back to TCP.
//
// # Contract and status
//
//   - Load/Version open the library once per Backend and report its
//     version (e.g. 22105 for 2.21.5).
//   - The transfer calls are the next step (see docs/dataplanes.md): a
//     communicator per trainer→inference group (ncclGetUniqueId on the
//     source, shipped in the TransferPlan URI as nccl://<hex id>;
//     ncclCommInitRank on every rank), then ncclGroupStart, one
//     ncclSend/ncclRecv (or ncclBroadcast) per plan range on a CUDA stream,
//     ncclGroupEnd and a stream sync; device memory comes from the caller
//     (torch tensors' data_ptr via the worker). Until then Available
//     reports the loaded version as unavailable for transfers, so a loaded
//     library never routes bytes into a stub, and Publish/Fetch fail with
//     dataplane.ErrNotImplemented.
package nccl

import (
	"context"
	"fmt"
	"io"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
	"github.com/asyncrl/asyncrl/transport/dataplane/internal/dlib"
)

// Config configures the NCCL backend.
type Config struct {
	// Library is the soname or path dlopened. Default "libnccl.so.2"
	// (found through LD_LIBRARY_PATH and the loader cache; pip's
	// nvidia-nccl-cu12 puts it in site-packages/nvidia/nccl/lib).
	Library string
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config { return Config{Library: "libnccl.so.2"} }

// Backend is the NCCL data plane.
type Backend struct {
	cfg  Config
	load dlib.Once[*loaded]
}

type loaded struct {
	lib     *dlib.Lib
	version int
}

var _ dataplane.Backend = (*Backend)(nil)

// New returns a Backend; nothing is loaded until Available or Version.
func New(cfg Config) (*Backend, error) {
	if cfg.Library == "" {
		return nil, fmt.Errorf("nccl: Config.Library must name a library, got empty")
	}
	return &Backend{cfg: cfg}, nil
}

// Name implements dataplane.Backend.
func (b *Backend) Name() string { return "nccl" }

// Version loads the library (once) and returns ncclGetVersion's code.
func (b *Backend) Version() (int, error) {
	l, err := b.load.Do(func() (*loaded, error) {
		lib, err := dlib.Open(b.cfg.Library)
		if err != nil {
			return nil, err
		}
		// ncclResult_t ncclGetVersion(int *version);
		var getVersion func(*int32) int32
		if err := lib.Func(&getVersion, "ncclGetVersion"); err != nil {
			return nil, err
		}
		var v int32
		if rc := getVersion(&v); rc != 0 {
			return nil, fmt.Errorf("ncclGetVersion returned ncclResult_t %d", rc)
		}
		return &loaded{lib: lib, version: int(v)}, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%w: nccl: %w", dataplane.ErrUnavailable, err)
	}
	return l.version, nil
}

// FormatVersion turns an NCCL version code into "major.minor.patch"
// (codes below 10000 use NCCL's pre-2.9 layout major*1000+minor*100+patch).
func FormatVersion(code int) string {
	if code < 10000 {
		return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
}

// Available implements dataplane.Backend. It is an error on every host
// for now: either the library is missing (the dlopen error), or it loaded
// and the transfer calls are not implemented yet.
func (b *Backend) Available() error {
	v, err := b.Version()
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: nccl: %s %s loaded, transfers not implemented yet: %w",
		dataplane.ErrUnavailable, b.cfg.Library, FormatVersion(v), dataplane.ErrNotImplemented)
}

// Publish implements dataplane.Backend; not implemented yet.
func (b *Backend) Publish(context.Context, *messages.TransferPlan, io.ReaderAt) (dataplane.Offer, error) {
	return nil, fmt.Errorf("nccl: publish: %w", dataplane.ErrNotImplemented)
}

// Fetch implements dataplane.Backend; not implemented yet.
func (b *Backend) Fetch(context.Context, *messages.TransferPlan, io.WriterAt) (dataplane.Result, error) {
	return dataplane.Result{}, fmt.Errorf("nccl: fetch: %w", dataplane.ErrNotImplemented)
}
