// Package storetest is the conformance suite every store.Store passes.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asyncrl/asyncrl/weights/store"
)

// Run runs the conformance suite; newStore returns a fresh, empty store.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("PutGetOverwrite", func(t *testing.T) { putGetOverwrite(t, newStore(t)) })
	t.Run("NotFound", func(t *testing.T) { notFound(t, newStore(t)) })
	t.Run("ListPrefix", func(t *testing.T) { listPrefix(t, newStore(t)) })
	t.Run("Delete", func(t *testing.T) { deleteKeys(t, newStore(t)) })
	t.Run("Commit", func(t *testing.T) { commit(t, newStore(t)) })
	t.Run("InvalidKeys", func(t *testing.T) { invalidKeys(t, newStore(t)) })
	t.Run("LargeObject", func(t *testing.T) { largeObject(t, newStore(t)) })
	t.Run("AtomicOverwrite", func(t *testing.T) { atomicOverwrite(t, newStore(t)) })
	t.Run("ParallelFiles", func(t *testing.T) { parallelFiles(t, newStore(t)) })
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func put(t *testing.T, s store.Store, key string, data []byte) {
	t.Helper()
	if err := store.PutBytes(ctx(t), s, key, data); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t *testing.T, s store.Store, key string) []byte {
	t.Helper()
	b, err := store.ReadAll(ctx(t), s, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return b
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func putGetOverwrite(t *testing.T, s store.Store) {
	put(t, s, "a/b/c.bin", []byte("first"))
	if got := get(t, s, "a/b/c.bin"); string(got) != "first" {
		t.Fatalf("got %q, want first", got)
	}
	put(t, s, "a/b/c.bin", []byte("second, longer"))
	if got := get(t, s, "a/b/c.bin"); string(got) != "second, longer" {
		t.Fatalf("after overwrite got %q", got)
	}
}

func notFound(t *testing.T, s store.Store) {
	_, err := s.Get(ctx(t), "missing/key")
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	put(t, s, "dir/file", []byte("x"))
	if _, err := s.Get(ctx(t), "dir"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get of a key prefix: %v, want ErrNotFound", err)
	}
}

func listPrefix(t *testing.T, s store.Store) {
	keys := []string{"delta-00000002/manifest.json", "delta-00000001/p.safetensors", "delta-00000001/manifest.json", "full-00000004/model.safetensors", "top"}
	for i, k := range keys {
		put(t, s, k, []byte{byte(i)})
	}
	all, err := s.List(ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(all, want) {
		t.Fatalf("List(\"\") = %v, want %v", all, want)
	}
	d, err := s.List(ctx(t), "delta-")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d, want[:3]) {
		t.Fatalf("List(delta-) = %v, want %v", d, want[:3])
	}
	one, err := s.List(ctx(t), "delta-00000001/")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(one, []string{"delta-00000001/manifest.json", "delta-00000001/p.safetensors"}) {
		t.Fatalf("List(delta-00000001/) = %v", one)
	}
	none, err := s.List(ctx(t), "nothing/")
	if err != nil || len(none) != 0 {
		t.Fatalf("List(nothing/) = %v, %v; want empty", none, err)
	}
}

func deleteKeys(t *testing.T, s store.Store) {
	put(t, s, "v/a", []byte("a"))
	put(t, s, "v/b", []byte("b"))
	if err := s.Delete(ctx(t), "v/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx(t), "v/a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted key still readable: %v", err)
	}
	if got := get(t, s, "v/b"); string(got) != "b" {
		t.Fatalf("sibling damaged: %q", got)
	}
	if err := s.Delete(ctx(t), "v/a"); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
	keys, err := s.List(ctx(t), "")
	if err != nil || !slices.Equal(keys, []string{"v/b"}) {
		t.Fatalf("List after delete = %v, %v", keys, err)
	}
}

func commit(t *testing.T, s store.Store) {
	put(t, s, "delta-00000001/payload", []byte("payload"))
	keys, _ := s.List(ctx(t), "delta-00000001/manifest.json")
	if len(keys) != 0 {
		t.Fatalf("manifest listed before commit: %v", keys)
	}
	if err := s.Commit(ctx(t), "delta-00000001/manifest.json", []byte(`{"version":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "delta-00000001/manifest.json"); string(got) != `{"version":1}` {
		t.Fatalf("committed manifest = %q", got)
	}
}

func invalidKeys(t *testing.T, s store.Store) {
	for _, k := range []string{"", "/abs", "a//b", "a/../b", "./a", "a/.tmp-x"} {
		if err := store.PutBytes(ctx(t), s, k, []byte("x")); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Get(ctx(t), k); !errors.Is(err, store.ErrInvalidKey) {
			t.Errorf("Get(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

func largeObject(t *testing.T, s store.Store) {
	data := randBytes(7, 3<<20+17) // several NATS chunks, not a round size
	if err := s.Put(ctx(t), "big/blob", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if got := get(t, s, "big/blob"); !bytes.Equal(got, data) {
		t.Fatalf("large object came back different (%d vs %d bytes)", len(got), len(data))
	}
}

// atomicOverwrite: readers racing an overwrite see the old or the new
// object whole, never a mix or a prefix. A racing read may fail instead
// (NATS purges the old chunks under a reader that is still streaming them):
// the weight layout never overwrites an object, and a failed read is retried,
// but a torn read would be served.
func atomicOverwrite(t *testing.T, s store.Store) {
	old, neu := bytes.Repeat([]byte{1}, 1<<20), bytes.Repeat([]byte{2}, 1<<20)
	put(t, s, "k", old)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	stop := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				select {
				case <-stop:
					return
				default:
				}
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				b, err := store.ReadAll(rctx, s, "k")
				cancel()
				if err != nil {
					if errors.Is(err, store.ErrNotFound) {
						errs <- fmt.Errorf("an overwritten key was briefly missing: %w", err)
					}
					return // a failed racing read is allowed; stop this reader
				}
				if !bytes.Equal(b, old) && !bytes.Equal(b, neu) {
					errs <- fmt.Errorf("read a torn object of %d bytes", len(b))
					return
				}
			}
		}()
	}
	for i := range 4 {
		if i%2 == 0 {
			put(t, s, "k", neu)
		} else {
			put(t, s, "k", old)
		}
	}
	close(stop)
	wg.Wait()
	if got := get(t, s, "k"); !bytes.Equal(got, old) {
		t.Fatal("after the overwrites the last object written is not what is read")
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func parallelFiles(t *testing.T, s store.Store) {
	src, dst := t.TempDir(), t.TempDir()
	var up, down []store.FileObject
	for i := range 9 {
		p := filepath.Join(src, fmt.Sprintf("f%d", i))
		if err := os.WriteFile(p, randBytes(uint64(i), 1000*i+1), 0o644); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("files/f%d", i)
		up = append(up, store.FileObject{Key: key, Path: p})
		down = append(down, store.FileObject{Key: key, Path: filepath.Join(dst, "sub", fmt.Sprintf("f%d", i))})
	}
	if err := store.PutFiles(ctx(t), s, up, 3); err != nil {
		t.Fatal(err)
	}
	if err := store.GetFiles(ctx(t), s, down, 3); err != nil {
		t.Fatal(err)
	}
	for i := range up {
		a, _ := os.ReadFile(up[i].Path)
		b, err := os.ReadFile(down[i].Path)
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("file %d differs after the round trip (%v)", i, err)
		}
	}
	err := store.GetFiles(ctx(t), s, []store.FileObject{{Key: "files/missing", Path: filepath.Join(dst, "m")}}, 2)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("downloading a missing key: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "m")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed download left a file: %v", err)
	}
}
