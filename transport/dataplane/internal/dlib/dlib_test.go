package dlib

import (
	"strings"
	"testing"
)

// libc is on every Linux host, so it exercises the real dlopen, dlsym and
// call path that NCCL and NIXL take on GPU hosts.
func TestLoadAndCallLibc(t *testing.T) {
	l, err := Open("libc.so.6")
	if err != nil {
		t.Skipf("no libc.so.6 on this host: %v", err)
	}
	var abs func(int32) int32
	if err := l.Func(&abs, "abs"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want int32 }{{-7, 7}, {0, 0}, {12, 12}} {
		if got := abs(tc.in); got != tc.want {
			t.Errorf("abs(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
	if l.Has("ncclGetVersion") {
		t.Fatal("libc exports ncclGetVersion?")
	}
	var f func() int32
	if err := l.Func(&f, "ncclGetVersion"); err == nil || !strings.Contains(err.Error(), "ncclGetVersion") {
		t.Fatalf("missing symbol: err %v, want one naming the symbol", err)
	}
}

func TestOpenMissing(t *testing.T) {
	_, err := Open("libasyncrl-definitely-missing.so.9")
	if err == nil || !strings.Contains(err.Error(), "libasyncrl-definitely-missing.so.9") {
		t.Fatalf("err %v, want a dlopen error naming the library", err)
	}
}

func TestOnce(t *testing.T) {
	var o Once[int]
	calls := 0
	for range 3 {
		v, err := o.Do(func() (int, error) { calls++; return 42, nil })
		if v != 42 || err != nil {
			t.Fatalf("Do = %d, %v", v, err)
		}
	}
	if calls != 1 {
		t.Fatalf("load ran %d times, want once", calls)
	}
}
