package store

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Discard reads a payload to its end (so a streamed encoder runs whole)
// and keeps nothing.
func TestDiscard(t *testing.T) {
	ctx := context.Background()
	r := strings.NewReader("payload")
	if err := (Discard{}).Put(ctx, "k", r, 7); err != nil || r.Len() != 0 {
		t.Fatalf("Put: %v, %d bytes left unread", err, r.Len())
	}
	if _, err := (Discard{}).Get(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Put: %v, want ErrNotFound", err)
	}
	if keys, err := (Discard{}).List(ctx, ""); err != nil || len(keys) != 0 {
		t.Fatalf("List: %v %v", keys, err)
	}
}
