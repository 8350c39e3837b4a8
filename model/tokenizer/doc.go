// Package tokenizer is the built-in policy's character-level tokenizer.
//
// The vocabulary is fixed and tiny so the built-in model, the built-in engine
// and the tasks agree on ids without any download: three special tokens
// (PAD, BOS, EOS) followed by the 95 printable ASCII characters 0x20..0x7E.
// Characters outside that range encode to Unknown ('?'), so Encode never fails
// and Decode(Encode(s)) == s for every printable-ASCII s.
package tokenizer
