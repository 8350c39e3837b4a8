package cluster

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func key(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// startKeyed starts a member with keys, joining join (nil for the first).
func startKeyed(t *testing.T, name string, keys [][]byte, join []string) (*Membership, error) {
	t.Helper()
	c := DefaultMembershipConfig(name)
	c.Keys, c.Join = keys, join
	m, err := JoinCluster(c, zerolog.Nop())
	if err == nil {
		t.Cleanup(func() { _ = m.Leave(time.Second) })
	}
	return m, err
}

func TestGossipKeySameKeyJoins(t *testing.T) {
	k := [][]byte{key(7, 32)}
	a, err := startKeyed(t, "a", k, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := startKeyed(t, "b", k, []string{a.Addr()})
	if err != nil {
		t.Fatalf("join with the same key: %v", err)
	}
	waitFor(t, "a and b see each other", func() bool { return len(a.Members()) == 2 && len(b.Members()) == 2 })
}

// TestGossipKeyRotation is the documented rotation's middle step: one node
// already sends with the new key, the other still with the old one; both
// hold both keys, so they still gossip.
func TestGossipKeyRotation(t *testing.T) {
	oldK, newK := key(1, 16), key(2, 16)
	a, err := startKeyed(t, "a", [][]byte{oldK, newK}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := startKeyed(t, "b", [][]byte{newK, oldK}, []string{a.Addr()})
	if err != nil {
		t.Fatalf("join mid-rotation: %v", err)
	}
	waitFor(t, "a and b see each other", func() bool { return len(a.Members()) == 2 && len(b.Members()) == 2 })
}

func TestGossipKeyOutsidersCannotJoin(t *testing.T) {
	a, err := startKeyed(t, "a", [][]byte{key(7, 32)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		keys [][]byte
	}{{"wrong-key", [][]byte{key(8, 32)}}, {"no-key", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := startKeyed(t, tc.name, tc.keys, []string{a.Addr()})
			if err == nil {
				t.Fatalf("%s joined a keyed cluster; members seen: %v", tc.name, m.Members())
			}
			if n := len(a.Members()); n != 1 {
				t.Fatalf("keyed member sees %d members after a refused join, want 1", n)
			}
		})
	}
	// The other way: a keyed node cannot join a plaintext cluster either.
	p, err := startKeyed(t, "plain", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := startKeyed(t, "keyed", [][]byte{key(7, 32)}, []string{p.Addr()}); err == nil {
		t.Fatal("a keyed node joined a plaintext cluster")
	}
}

func TestLoadGossipKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	k32, k16 := key(3, 32), key(4, 16)
	b64 := base64.StdEncoding.EncodeToString
	got, err := LoadGossipKeys(write("two", []byte("# primary first\n"+b64(k32)+"\n\n"+b64(k16)+"\n")))
	if err != nil || len(got) != 2 || !bytes.Equal(got[0], k32) || !bytes.Equal(got[1], k16) {
		t.Fatalf("base64 lines: %v %v", got, err)
	}
	raw := []byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\xf0\xf1\xf2\xf3\xf4\xf5\xf6\xf7")
	if got, err = LoadGossipKeys(write("raw", raw)); err != nil || len(got) != 1 || !bytes.Equal(got[0], raw) {
		t.Fatalf("raw 24-byte key: %v %v", got, err)
	}
	for _, tc := range []struct{ name, body string }{
		{"short", b64(key(5, 20)) + "\n"},
		{"notbase64", "this is not a key!!\n"},
		{"empty", "# nothing\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := write(tc.name, []byte(tc.body))
			_, err := LoadGossipKeys(p)
			if !errors.Is(err, ErrBadGossipKey) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "16, 24 or 32-byte") {
				t.Fatalf("err = %v, want ErrBadGossipKey naming %s and the lengths", err, p)
			}
		})
	}
	if _, err := LoadGossipKeys(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing file: err = %v", err)
	}
}
