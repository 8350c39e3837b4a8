// Package hftokenizer loads a Hugging Face tokenizer.json with a byte-level
// BPE model — the family Qwen2/Qwen2.5/Qwen3, Llama-3, DeepSeek-V3 and GPT-2
// use — and encodes
// text to token ids and decodes ids back to text, the way the Rust
// `tokenizers` library does, so that asyncrl can talk to vLLM token-in /
// token-out and turn generated ids into text for rewards.
//
// Supported pipeline (anything else is rejected by Load with an error naming
// the field, never silently mis-tokenized):
//
//   - normalizer: null, NFC, or a Sequence of NFC (Qwen2 uses NFC).
//   - pre_tokenizer: ByteLevel alone (GPT-2: its built-in regex when
//     use_regex is true, add_prefix_space per text segment), or a Sequence of
//     Split{Regex, behavior Isolated} + ByteLevel{use_regex false}, where the
//     regex is the Qwen2 or the Llama-3 (cl100k) pattern. Those patterns use a
//     lookahead `\s+(?!\S)` that Go's regexp lacks, so the split is a
//     hand-written scanner per pattern (pretokenize.go) that emulates the
//     regex's leftmost-first alternation and backtracking; testdata/pretok.json
//     holds its expected splits, produced by Python's `regex` module (the
//     engine transformers' slow tokenizers use) from the same pattern strings.
//     DeepSeek-V3's Sequence of three Splits (`\p{N}{1,3}`, a CJK/kana run
//     class, then a word/punctuation/whitespace pattern) + ByteLevel is
//     supported the same way (pretokenize_seq.go): each Split cuts every
//     piece of the one before, and text between matches stays a piece
//     (behavior Isolated). Any other Split regex is refused by Load.
//
// The real Qwen3, Llama-3.1 and DeepSeek-V3 tokenizer.json files (fetched,
// pinned, by .ci/tokenizers) are checked against Hugging Face's JavaScript
// tokenizers (@huggingface/tokenizers, run under Node) on special tokens,
// unicode, digits, whitespace runs and seeded random text
// (TestRealTokenizersMatchReference).
//   - model: BPE with merges in either serialised form ("a b" strings or
//     ["a","b"] pairs), optional unk_token, ignore_merges (Llama-3). Merges are
//     applied one at a time, lowest rank first and leftmost among equal ranks,
//     exactly as tokenizers' BPE::merge_word does. dropout, byte_fallback,
//     continuing_subword_prefix and end_of_word_suffix are rejected.
//   - added_tokens: matched on the raw text before anything else,
//     leftmost-longest (as tokenizers' Aho-Corasick matcher), honouring
//     single_word, lstrip and rstrip. All added tokens are matched, special or
//     not: a prompt that contains the text "<|im_start|>" gets that token's
//     id, as vLLM does for a rendered chat template. (tokenizers matches
//     `normalized: true` added tokens after normalisation; here every added
//     token is matched before it, which differs only if NFC would rewrite the
//     token's own text.)
//   - decoder: ByteLevel. Decode maps each token's characters back to bytes
//     (a token with a character outside the byte alphabet, e.g. an added token
//     with a space, contributes its UTF-8 text as is) and converts the bytes
//     to a string replacing each maximal invalid subsequence with U+FFFD, as
//     Rust's String::from_utf8_lossy does. Ids outside the vocabulary are
//     skipped.
//   - post_processor: read only for the special tokens a TemplateProcessing
//     puts around a single sequence (SpecialPrefix/SpecialSuffix: Llama-3's
//     <|begin_of_text|>). Encode never adds BOS/EOS: for RL the prompt
//     text (usually a rendered chat template) already spells out every special
//     token it needs, and the Llama-3 template's literal "<|begin_of_text|>"
//     encodes to the BOS id through the added-token matcher. A caller sending
//     a raw non-template prompt to a model that expects BOS must prepend it
//     itself (SpecialPrefix()).
//
// Encode accepts any Go string. Invalid UTF-8 bytes are kept as single bytes
// (classed as punctuation by the pre-tokenizer), so Decode(Encode(s)) == s
// holds for every NFC-normalised s when the vocabulary covers all 256 bytes,
// no added token strips whitespace and ByteLevel's add_prefix_space is off
// (as it is for Qwen2 and Llama-3; GPT-2-style files that set it gain a
// leading space per text segment, as in tokenizers).
//
// A Tokenizer is immutable after Load and safe for concurrent use; it keeps no
// cache. Encoder is the small interface rollouts use: Local adapts a
// Tokenizer, and package vllmtok implements it over vLLM's /tokenize and
// /detokenize routes for engines that own the tokenizer.
//
// Why not a library: github.com/sugarme/tokenizer (a port of tokenizers) pulls
// seven modules, some unversioned and one a progress bar, for far more than
// byte-level BPE; daulet/tokenizers is cgo + Rust. The byte-level BPE subset
// is small enough to own and test against upstream vectors. The one dependency
// is golang.org/x/text/unicode/norm for NFC, already in the module graph.
package hftokenizer
