#!/usr/bin/env python3
"""Regenerates the fixtures in this directory (see README.md).

Run: /usr/bin/python3 gen.py   (needs Debian's python3-regex for pretok.json)
"""
import json
import random

import regex

# GPT-2's bytes_to_unicode, as in transformers' tokenization_gpt2.py/qwen2.py.
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2**8):
        if b not in bs:
            bs.append(b)
            cs.append(2**8 + n)
            n += 1
    return dict(zip(bs, [chr(n) for n in cs]))

QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def added(id_, content):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def qwen2_fixture(pattern=QWEN2, ignore_merges=False):
    # Vocabulary and merges of transformers tests/models/qwen2/test_tokenization_qwen2.py
    # (huggingface/transformers@04bee35c8777d027a981e061f32fc12a1b3265d3, setUpClass).
    vocab = list(bytes_to_unicode().values())
    vocab.extend(["\u0120l", "\u0120n", "\u0120lo", "\u0120low", "er", "\u0120lowest", "\u0120newer", "\u0120wider",
                  "01", ";}", ";}\u010a", "\u00cf\u0135", "\u0120#", "##"])
    merges = ["\u0120 l", "\u0120l o", "\u0120lo w", "e r", "0 1", "; }", ";} \u010a", "\u00cf \u0135", "\u0120 #", "# #"]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        # <|endoftext|> gets id 270 in that test (len(vocab)); <|im_start|> 271 as in its decode test.
        "added_tokens": [added(270, "<|endoftext|>"), added(271, "<|im_start|>"), added(272, "<|im_end|>")],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges,
                  "vocab": {t: i for i, t in enumerate(vocab)},
                  # the newer [["a","b"], ...] form
                  "merges": [m.split(" ") for m in merges]},
    }


def gpt2_fixture():
    # Vocabulary and merges of transformers tests/models/gpt2/test_tokenization_gpt2.py
    # (huggingface/transformers@02185cfd15365229a58985c6ef385663def0b38b, setUp); not byte-complete,
    # so it exercises unk_token.
    vocab = ["l", "o", "w", "e", "r", "s", "t", "i", "d", "n", "\u0120", "\u0120l", "\u0120n", "\u0120lo", "\u0120low",
             "er", "\u0120lowest", "\u0120newer", "\u0120wider", "<unk>", "<|endoftext|>"]
    merges = ["#version: 0.2", "\u0120 l", "\u0120l o", "\u0120lo w", "e r"]
    return {
        "version": "1.0",
        "added_tokens": [added(19, "<unk>"), added(20, "<|endoftext|>")],
        "normalizer": None,
        # from_pretrained_kwargs = {"add_prefix_space": True}
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False,
                  "vocab": {t: i for i, t in enumerate(vocab)},
                  # the older "a b" string form, with merges.txt's header line
                  "merges": merges},
    }


# Hand-picked pre-tokenizer cases: contractions, digits, whitespace runs before
# a word, newlines, punctuation with trailing newlines, CJK, emoji, marks.
CASES = [
    "Hello world", "I'm here, you're there; we'll see what they've done. He'd", "DON'T SHOUT'S 'RE",
    "it's 'sup 's", " 't", "x 't", "'ſ", "12345 and 1.5e10 or 2024-01-02", "\u00bd \u2163\u2164 \u0663\u0664\u0665",
    "a  b   c", "   leading", "trailing   ", "\n\nhello\n\n\nworld\n", "a \n b", "a  \n  b", "line1\r\nline2\r\n",
    "!!!\n\n", "foo!!!\nbar", " ?!", "\t\tindent", "\tx", "x\t y", "def f(x):\n    return x**2\n",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "emoji \U0001F917\U0001F600 ok", "caf\u00e9 na\u00efve", "e\u0301 combining",
    "<|im_start|>user\nHi<|im_end|>", "\u00a0nbsp\u3000ideo", "x\u2028y\u0085z", "''''", "'s's's", "1'2",
    "$100,000.00!", "\U0001d400\U0001d401", "a\u200bb", "   ", "\n", " ", "", "a", "\r\n\r\n", "...   ...", "a\x1cb\x1f c", "\x0b\x0cv",
]


def random_string(rng):
    pools = [" ", "  ", "\n", "\r\n", "\t", "'", "'s", "'LL", "a", "Z", "hello", "\u00e9", "\u4e2d", "\u0663",
             "7", "42", "\u00bd", ".", ",", "!?", "\U0001F600", "\u3000", "\u00a0", "_", "-", "\u0301", "ſ", "$"]
    return "".join(rng.choice(pools) for _ in range(rng.randint(0, 14)))


def pretok():
    rng = random.Random(13)
    texts = CASES + [random_string(rng) for _ in range(300)]
    out = []
    for name, pat in (("qwen2", QWEN2), ("llama3", LLAMA3), ("gpt2", GPT2)):
        r = regex.compile(pat)
        for t in texts:
            out.append({"pattern": name, "text": t, "pieces": r.findall(t)})
    return {"source": "Python regex module (python3-regex, Debian) findall over the patterns in gen.py",
            "cases": out}


def dump(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    dump("qwen2/tokenizer.json", qwen2_fixture())
    dump("llama3/tokenizer.json", qwen2_fixture(LLAMA3, ignore_merges=True))
    dump("gpt2/tokenizer.json", gpt2_fixture())
    dump("pretok.json", pretok())
