package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/asyncrl/asyncrl/messages"
)

// Registry holds the backends of one process and picks one by preference.
type Registry struct {
	backends map[string]Backend
	order    []string
}

// Skipped records a preferred backend that Pick passed over, and why.
type Skipped struct {
	Name   string
	Reason error
}

// NewRegistry registers backends by Name; a later duplicate name replaces
// an earlier one.
func NewRegistry(backends ...Backend) *Registry {
	r := &Registry{backends: map[string]Backend{}}
	for _, b := range backends {
		if _, dup := r.backends[b.Name()]; !dup {
			r.order = append(r.order, b.Name())
		}
		r.backends[b.Name()] = b
	}
	return r
}

// Get returns the backend called name.
func (r *Registry) Get(name string) (Backend, bool) {
	b, ok := r.backends[name]
	return b, ok
}

// Names lists registered backends in registration order.
func (r *Registry) Names() []string { return append([]string(nil), r.order...) }

// FallbackName is the backend Pick falls back to: TCP runs on every host.
const FallbackName = "tcp"

// Pick returns the first backend of prefs that is registered and
// available, then "tcp" if prefs did not name it. skipped says why each
// earlier preference was passed over (not registered, or its Available
// error), so callers can log the fallback once. An error wrapping
// ErrUnavailable means nothing usable was found.
func (r *Registry) Pick(prefs ...string) (Backend, []Skipped, error) {
	var skipped []Skipped
	tried := map[string]bool{}
	for _, name := range append(append([]string(nil), prefs...), FallbackName) {
		if tried[name] {
			continue
		}
		tried[name] = true
		b, ok := r.backends[name]
		if !ok {
			skipped = append(skipped, Skipped{Name: name, Reason: fmt.Errorf("%w: %s: not registered", ErrUnavailable, name)})
			continue
		}
		if err := b.Available(); err != nil {
			if !errors.Is(err, ErrUnavailable) {
				err = fmt.Errorf("%w: %s: %w", ErrUnavailable, name, err)
			}
			skipped = append(skipped, Skipped{Name: name, Reason: err})
			continue
		}
		return b, skipped, nil
	}
	reasons := make([]string, len(skipped))
	for i, s := range skipped {
		reasons[i] = s.Reason.Error()
	}
	return nil, skipped, fmt.Errorf("%w: no usable backend among %v: %s", ErrUnavailable, prefs, strings.Join(reasons, "; "))
}

// ForURI returns the backend that serves a plan's URI: the receiver does
// not choose, the source did when it published. The scheme names the
// backend ("tcp", "shm", "nccl", "nixl"); "file" is served by "shm".
func (r *Registry) ForURI(uri string) (Backend, error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("%w: URI %q has no scheme", ErrBadPlan, uri)
	}
	name := u.Scheme
	if name == "file" {
		name = "shm"
	}
	b, ok := r.backends[name]
	if !ok {
		return nil, fmt.Errorf("%w: no %q backend registered for %s", ErrUnavailable, name, uri)
	}
	return b, nil
}

// Receive is a destination's whole step for one plan: pick the backend by
// the plan's URI, fetch into dst, and return the control message to
// publish — messages.TransferDone, or messages.TransferFailed naming the
// failing range and the reason.
func (r *Registry) Receive(ctx context.Context, p *messages.TransferPlan, dest string, dst io.WriterAt) messages.Message {
	b, err := r.ForURI(p.URI)
	if err != nil {
		return FailedMessage(p, dest, err)
	}
	res, err := b.Fetch(ctx, p, dst)
	if err != nil {
		return FailedMessage(p, dest, err)
	}
	return DoneMessage(p, dest, res)
}
