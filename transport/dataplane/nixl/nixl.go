// Package nixl is the NIXL data plane (NVIDIA Inference Xfer Library: the
// one-sided, sharded pull SkyRL uses for its fast weight sync), loaded at
// run time with purego. On a host without libnixl.so Available reports
// dataplane.ErrUnavailable with the dlopen error and the registry falls
// back to TCP.
//
// # Contract and status
//
//   - Load opens Config.Library once and looks up Config.ProbeSymbols;
//     libnixl.so itself exports a C++ API (mangled names), so calling it
//     from Go needs the small C shim NIXL's Rust binding uses
//     (nixl_capi_create_agent, nixl_capi_register_mem, nixl_capi_create_xfer_req,
//     ...) built as a shared library. Config.ShimLibrary names it; when it
//     loads, Probe reports which of its symbols exist.
//   - The transfer calls are the next step (docs/dataplanes.md): each
//     inference rank creates an agent, registers its destination buffers,
//     exchanges agent metadata through the TransferPlan (URI
//     nixl://<agent>), builds one READ transfer request per
//     plan.Transfer of the sharded planner and polls it to completion.
//     Until then Available is an error on every host and Publish/Fetch fail
//     with dataplane.ErrNotImplemented.
package nixl

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/asyncrl/asyncrl/messages"
	"github.com/asyncrl/asyncrl/transport/dataplane"
	"github.com/asyncrl/asyncrl/transport/dataplane/internal/dlib"
)

// Config configures the NIXL backend.
type Config struct {
	// Library is the NIXL core library. Default "libnixl.so" (NIXL installs
	// it under /opt/nvidia/nvda_nixl/lib/x86_64-linux-gnu; add that to
	// LD_LIBRARY_PATH or give the full path).
	Library string
	// ShimLibrary is the C shim exporting nixl_capi_* functions; empty
	// skips it. Default "libnixl_capi.so".
	ShimLibrary string
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{Library: "libnixl.so", ShimLibrary: "libnixl_capi.so"}
}

// ShimSymbols are the C functions the transfer path will call.
var ShimSymbols = []string{"nixl_capi_create_agent", "nixl_capi_destroy_agent"}

// Probe is what a load found.
type Probe struct {
	// Library loaded.
	Library string
	// Shim is the loaded shim library, empty when it did not load.
	Shim string
	// ShimError says why the shim did not load.
	ShimError string
	// Missing lists ShimSymbols the shim lacks.
	Missing []string
}

// Backend is the NIXL data plane.
type Backend struct {
	cfg  Config
	load dlib.Once[Probe]
}

var _ dataplane.Backend = (*Backend)(nil)

// New returns a Backend; nothing is loaded until Available or Load.
func New(cfg Config) (*Backend, error) {
	if cfg.Library == "" {
		return nil, fmt.Errorf("nixl: Config.Library must name a library, got empty")
	}
	return &Backend{cfg: cfg}, nil
}

// Name implements dataplane.Backend.
func (b *Backend) Name() string { return "nixl" }

// Load opens the libraries once and reports what it found.
func (b *Backend) Load() (Probe, error) {
	p, err := b.load.Do(func() (Probe, error) {
		if _, err := dlib.Open(b.cfg.Library); err != nil {
			return Probe{}, err
		}
		p := Probe{Library: b.cfg.Library}
		if b.cfg.ShimLibrary == "" {
			return p, nil
		}
		shim, err := dlib.Open(b.cfg.ShimLibrary)
		if err != nil {
			p.ShimError = err.Error()
			return p, nil
		}
		p.Shim = b.cfg.ShimLibrary
		for _, s := range ShimSymbols {
			if !shim.Has(s) {
				p.Missing = append(p.Missing, s)
			}
		}
		return p, nil
	})
	if err != nil {
		return Probe{}, fmt.Errorf("%w: nixl: %w", dataplane.ErrUnavailable, err)
	}
	return p, nil
}

// Available implements dataplane.Backend: an error on every host for now
// (missing library, or loaded with transfers not implemented yet).
func (b *Backend) Available() error {
	p, err := b.Load()
	if err != nil {
		return err
	}
	shim := "shim " + p.Shim
	if p.Shim == "" {
		shim = "no shim (" + p.ShimError + ")"
	} else if len(p.Missing) > 0 {
		shim += " missing " + strings.Join(p.Missing, ",")
	}
	return fmt.Errorf("%w: nixl: %s loaded, %s; transfers not implemented yet: %w",
		dataplane.ErrUnavailable, p.Library, shim, dataplane.ErrNotImplemented)
}

// Publish implements dataplane.Backend; not implemented yet.
func (b *Backend) Publish(context.Context, *messages.TransferPlan, io.ReaderAt) (dataplane.Offer, error) {
	return nil, fmt.Errorf("nixl: publish: %w", dataplane.ErrNotImplemented)
}

// Fetch implements dataplane.Backend; not implemented yet.
func (b *Backend) Fetch(context.Context, *messages.TransferPlan, io.WriterAt) (dataplane.Result, error) {
	return dataplane.Result{}, fmt.Errorf("nixl: fetch: %w", dataplane.ErrNotImplemented)
}
