package cluster

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/memberlist"
)

// ErrBadGossipKey is returned for a gossip key file that holds no usable
// AES key.
var ErrBadGossipKey = errors.New("cluster: bad gossip key")

// validKeyLen reports whether n bytes is an AES-128, -192 or -256 key,
// the sizes memberlist's keyring accepts.
func validKeyLen(n int) bool { return n == 16 || n == 24 || n == 32 }

// LoadGossipKeys reads the gossip encryption keys from path. The file holds
// either one raw key (exactly 16, 24 or 32 bytes) or one base64 key a line
// (blank lines and lines starting with # skipped). The first key is the
// primary one (this node encrypts with it); every key decrypts, which is how
// a key is rotated one node restart at a time (docs/security.md).
func LoadGossipKeys(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster: gossip key file: %w", err)
	}
	// A raw key: binary, so only its length says it is one; a base64
	// line of 16/24/32 characters decodes to 12/18/24 bytes, so take the
	// raw reading only when the text is not valid base64 of a valid key.
	if validKeyLen(len(b)) {
		if _, berr := decodeKeyLine(string(b)); berr != nil {
			return [][]byte{b}, nil
		}
	}
	var keys [][]byte
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := decodeKeyLine(line)
		if err != nil {
			return nil, fmt.Errorf("%w: %s line %d: %w (want base64 of a 16, 24 or 32-byte AES key, one a line, or the raw key alone; make one with: head -c 32 /dev/urandom | base64)", ErrBadGossipKey, path, i+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: %s holds no key (want base64 of a 16, 24 or 32-byte AES key, one a line, or the raw key alone; make one with: head -c 32 /dev/urandom | base64)", ErrBadGossipKey, path)
	}
	return keys, nil
}

// decodeKeyLine decodes one base64 key and checks its length.
func decodeKeyLine(line string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(line))
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	if !validKeyLen(len(k)) {
		return nil, fmt.Errorf("key is %d bytes", len(k))
	}
	return k, nil
}

// keyring builds memberlist's keyring: keys[0] primary, all of them
// accepted. Nil keys: no encryption (nil keyring).
func keyring(keys [][]byte) (*memberlist.Keyring, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	kr, err := memberlist.NewKeyring(keys[1:], keys[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadGossipKey, err)
	}
	return kr, nil
}
