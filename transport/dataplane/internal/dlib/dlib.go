// Package dlib loads shared libraries at run time without cgo (purego), so
// GPU data planes build everywhere and only say "unavailable" on hosts that
// lack the library.
package dlib

import (
	"fmt"
	"sync"

	"github.com/ebitengine/purego"
)

// Lib is a loaded shared library.
type Lib struct {
	// Path is the name it was opened with.
	Path   string
	handle uintptr
}

// Open dlopens path (a soname searched on the loader path, or a file path)
// with RTLD_NOW, so a missing dependency fails here rather than at the
// first call, and RTLD_GLOBAL, because NCCL's and NIXL's plugins resolve
// symbols of the library that loaded them.
func Open(path string) (*Lib, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("dlopen %s: %w", path, err)
	}
	return &Lib{Path: path, handle: h}, nil
}

// Func binds the C function name to fptr (a pointer to a Go func variable
// whose signature matches the C prototype). Looking the symbol up first
// turns a missing symbol into an error instead of purego's panic.
func (l *Lib) Func(fptr any, name string) error {
	sym, err := purego.Dlsym(l.handle, name)
	if err != nil {
		return fmt.Errorf("%s: symbol %s: %w", l.Path, name, err)
	}
	purego.RegisterFunc(fptr, sym)
	return nil
}

// Has reports whether the library exports name.
func (l *Lib) Has(name string) bool {
	_, err := purego.Dlsym(l.handle, name)
	return err == nil
}

// Once memoises one load attempt: dlopen is not free and its outcome does
// not change while the process runs.
type Once[T any] struct {
	once sync.Once
	v    T
	err  error
}

// Do runs load the first time and returns its result every time.
func (o *Once[T]) Do(load func() (T, error)) (T, error) {
	o.once.Do(func() { o.v, o.err = load() })
	return o.v, o.err
}
