package fsutil

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCopyDirCopiesRegularFilesOnly(t *testing.T) {
	src := t.TempDir()
	for name, body := range map[string]string{"a.safetensors": "AAAA", "index.json": "{}"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "sub", "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "new", "dir") // created by CopyDir
	if err := CopyDir(dst, src); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 2 || names[0] != "a.safetensors" || names[1] != "index.json" {
		t.Fatalf("dst holds %v, want [a.safetensors index.json] (no subdirectory)", names)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "a.safetensors")); string(b) != "AAAA" {
		t.Fatalf("a.safetensors = %q, want AAAA", b)
	}
}

func TestCopyDirMissingSource(t *testing.T) {
	if err := CopyDir(t.TempDir(), filepath.Join(t.TempDir(), "absent")); !os.IsNotExist(err) {
		t.Fatalf("err = %v, want a not-exist error", err)
	}
}
