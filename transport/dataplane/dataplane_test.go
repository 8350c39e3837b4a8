package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/asyncrl/asyncrl/messages"
)

func TestSumKnownVectors(t *testing.T) {
	for _, tc := range []struct {
		alg  Algorithm
		in   string
		want string
	}{
		{CRC32C, "123456789", "crc32c:e3069283"}, // the CRC-32C check value
		{CRC32C, "", "crc32c:00000000"},
		{XXH3, "", "xxh3:2d06800538d394c2"}, // XXH3_64bits("") from the reference implementation
	} {
		if got := Sum(tc.alg, []byte(tc.in)); got != tc.want {
			t.Errorf("Sum(%s, %q) = %s, want %s", tc.alg, tc.in, got, tc.want)
		}
	}
}

func TestCheckerStreamsAcrossWrites(t *testing.T) {
	data := []byte(strings.Repeat("asyncrl data plane ", 1000))
	for _, alg := range []Algorithm{XXH3, CRC32C} {
		c, err := NewChecker(Sum(alg, data))
		if err != nil {
			t.Fatal(err)
		}
		c.Write(data[:7])
		c.Write(data[7:5000])
		c.Write(data[5000:])
		if err := c.Verify(); err != nil {
			t.Errorf("%s: %v", alg, err)
		}
		bad, _ := NewChecker(Sum(alg, data))
		bad.Write(data[1:])
		if err := bad.Verify(); !errors.Is(err, ErrChecksum) {
			t.Errorf("%s: short data verified: %v", alg, err)
		}
	}
	for _, spec := range []string{"xxh3", "md5:00", "xxh3:zz06800538d394c2", "crc32c:0"} {
		if _, err := NewChecker(spec); !errors.Is(err, ErrBadPlan) {
			t.Errorf("NewChecker(%q): %v, want ErrBadPlan", spec, err)
		}
	}
	if c, _ := NewChecker(""); c.Verify() != nil {
		t.Error("empty spec must accept anything")
	}
}

func TestSplitAndValidateRanges(t *testing.T) {
	rs := SplitRanges("w", 10, 4)
	if len(rs) != 3 || rs[2].Offset != 8 || rs[2].Length != 2 {
		t.Fatalf("SplitRanges = %v", rs)
	}
	if end, err := ValidateRanges(rs); err != nil || end != 10 {
		t.Fatalf("ValidateRanges = %d, %v", end, err)
	}
	for name, tc := range map[string]struct {
		rs  []messages.ByteRange
		idx int
	}{
		"overlap":  {[]messages.ByteRange{{Offset: 8, Length: 4}, {Offset: 0, Length: 4}, {Offset: 3, Length: 2}}, 2},
		"empty":    {[]messages.ByteRange{{Offset: 0, Length: 0}}, 0},
		"negative": {[]messages.ByteRange{{Offset: 4, Length: 1}, {Offset: -1, Length: 1}}, 1},
	} {
		_, err := ValidateRanges(tc.rs)
		var re *RangeError
		if !errors.Is(err, ErrBadPlan) || !errors.As(err, &re) || re.Index != tc.idx {
			t.Errorf("%s: %v, want ErrBadPlan at range %d", name, err, tc.idx)
		}
	}
}

func TestChecksumReaderAtMatchesSlicer(t *testing.T) {
	buf := Buffer([]byte(strings.Repeat("0123456789", 100)))
	a := SplitRanges("", int64(len(buf)), 300)
	b := SplitRanges("", int64(len(buf)), 300)
	if err := Checksum(buf, a, CRC32C); err != nil {
		t.Fatal(err)
	}
	if err := Checksum(io.NewSectionReader(buf, 0, int64(len(buf))), b, CRC32C); err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i].Checksum != b[i].Checksum || a[i].Checksum == "" {
			t.Fatalf("range %d: %q vs %q", i, a[i].Checksum, b[i].Checksum)
		}
	}
}

type fakeBackend struct {
	name string
	err  error
}

func (f fakeBackend) Name() string     { return f.name }
func (f fakeBackend) Available() error { return f.err }
func (f fakeBackend) Publish(context.Context, *messages.TransferPlan, io.ReaderAt) (Offer, error) {
	return nil, nil
}
func (f fakeBackend) Fetch(context.Context, *messages.TransferPlan, io.WriterAt) (Result, error) {
	return Result{}, nil
}

func TestRegistryPick(t *testing.T) {
	gone := fmt.Errorf("%w: no GPU", ErrUnavailable)
	reg := NewRegistry(fakeBackend{"nccl", gone}, fakeBackend{"shm", nil}, fakeBackend{"tcp", nil},
		fakeBackend{"nixl", errors.New("plain error")})
	for _, tc := range []struct {
		prefs   []string
		want    string
		skipped []string
	}{
		{[]string{"nccl", "shm"}, "shm", []string{"nccl"}},
		{[]string{"nixl", "nccl"}, "tcp", []string{"nixl", "nccl"}},
		{[]string{"rdma"}, "tcp", []string{"rdma"}},
		{nil, "tcp", nil},
		{[]string{"tcp", "shm"}, "tcp", nil},
	} {
		b, skipped, err := reg.Pick(tc.prefs...)
		if err != nil || b.Name() != tc.want || len(skipped) != len(tc.skipped) {
			t.Errorf("Pick(%v) = %v, %v, %v; want %s after %v", tc.prefs, b, skipped, err, tc.want, tc.skipped)
			continue
		}
		for i, s := range skipped {
			if s.Name != tc.skipped[i] || !errors.Is(s.Reason, ErrUnavailable) {
				t.Errorf("Pick(%v): skipped[%d] = %v", tc.prefs, i, s)
			}
		}
	}
	_, _, err := NewRegistry(fakeBackend{"nccl", gone}).Pick("nccl")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no GPU") {
		t.Fatalf("no tcp registered: %v", err)
	}
}

func TestFailedMessageRange(t *testing.T) {
	p := &messages.TransferPlan{Header: messages.Header{RunID: "r", Version: 3}, TransferID: "t"}
	f := FailedMessage(p, "e0", fmt.Errorf("wrapped: %w", &RangeError{Index: 5, Err: ErrChecksum}))
	if f.Range != 5 || f.Version != 3 || f.RunID != "r" || !strings.Contains(f.Reason, "checksum") {
		t.Fatalf("%s", f)
	}
	if f := FailedMessage(p, "e0", ErrIncomplete); f.Range != -1 {
		t.Fatalf("%s: want range -1", f)
	}
}

func TestRemap(t *testing.T) {
	ranges := []messages.ByteRange{{Offset: 10, Length: 4}, {Offset: 0, Length: 2}, {Offset: 14, Length: 3}}
	offs := []int64{0, 7, 4}
	dst := make(Buffer, 9)
	w, err := Remap(dst, ranges, offs)
	if err != nil {
		t.Fatal(err)
	}
	// One write spanning ranges 0 and 2 (source 10..16), one into range 1.
	if n, err := w.WriteAt([]byte("abcdefg"), 10); n != 7 || err != nil {
		t.Fatalf("WriteAt = %d, %v", n, err)
	}
	w.WriteAt([]byte("XY"), 0)
	if string(dst) != "abcdefgXY" {
		t.Fatalf("dst %q", dst)
	}
	if _, err := w.WriteAt([]byte("z"), 5); err == nil {
		t.Fatal("write outside every range accepted")
	}
	s := w.(Slicer)
	if b, err := s.Slice(11, 2); err != nil || string(b) != "bc" {
		t.Fatalf("Slice = %q, %v", b, err)
	}
	if _, err := s.Slice(12, 4); err == nil {
		t.Fatal("window across two ranges accepted")
	}
	if _, err := Remap(dst, ranges, offs[:1]); !errors.Is(err, ErrBadPlan) {
		t.Fatalf("short offsets: %v", err)
	}
}
