package tokenizer

import "testing"

func TestRoundTripPrintable(t *testing.T) {
	var s []byte
	for c := byte(0x20); c <= 0x7E; c++ {
		s = append(s, c)
	}
	ids := Encode(string(s))
	for i, id := range ids {
		if id < 3 || id >= VocabSize {
			t.Fatalf("char %q got id %d outside [3,%d)", s[i], id, VocabSize)
		}
	}
	if got := Decode(ids); got != string(s) {
		t.Fatalf("Decode(Encode(s)) = %q, want %q", got, s)
	}
}

func TestSpecialsAndUnknown(t *testing.T) {
	if VocabSize != 98 {
		t.Fatalf("VocabSize = %d, want 98", VocabSize)
	}
	if got := Encode("a\nb"); got[1] != Unknown {
		t.Fatalf("newline encoded to %d, want Unknown %d", got[1], Unknown)
	}
	if got := Decode([]int32{BOS, ID('h'), ID('i'), EOS, PAD, 500}); got != "hi" {
		t.Fatalf("Decode with specials = %q, want \"hi\"", got)
	}
	if Piece(EOS) != "" || Piece(ID('z')) != "z" {
		t.Fatalf("Piece mismatch: %q %q", Piece(EOS), Piece(ID('z')))
	}
}
