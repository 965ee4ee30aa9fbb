#!/usr/bin/env python3
"""Reference ids for core/text/ClipTokenizer from transformers' own CLIPTokenizer.

    python3 tools/reference/make_tokenizer_fixtures.py resources/clip/bpe_simple_vocab_16e6.txt.gz \
        tests/data/tokenizer/clip_ids.json

Needs `transformers` (and, for transformers >= 5, `tokenizers`); no network: the tokenizer is built
from the openai merges file given on the command line, written out as the vocab.json + merges.txt
pair that Hugging Face CLIP checkpoints carry (transformers tokenization_clip.py, openai/CLIP
simple_tokenizer.py), and loaded
from that local folder. Nothing of the tokenizer is re-implemented here: every id in the output is
what transformers returned.

ftfy is blocked before transformers is imported, so a transformers 4.x runs its ftfy-less path
(BasicTokenizer, "python-basic"); transformers 5 has only the `tokenizers`-backed class
("tokenizers"). The flavour used is written into the file, and tests/core/tst_cliptokenizer.cpp
checks core/text/ClipTokenizer in that flavour.

Two tokenizers are run on every prompt: "sd1" (pad <|endoftext|>, SD 1.x and SDXL tokenizer/) and
"sd2" (pad "!", SD 2.x tokenizer/ and SDXL tokenizer_2/, where "!" is an added token). For each:
`ids` = tokenizer(text, add_special_tokens=False).input_ids (no truncation) and, for every fourth
prompt and every prompt over 75 tokens, `framed` = tokenizer(text, padding="max_length",
max_length=77, truncation=True).input_ids, the call diffusers makes. The prompt list is fixed (a hand-written part plus a seeded generated part), so two runs with
the same library versions write identical files.
"""
import gzip
import hashlib
import json
import os
import platform
import random
import sys
import tempfile
import time

MERGES = 49152 - 256 - 2  # openai/CLIP simple_tokenizer.py: merges[1:49152-256-2+1]


def bytes_to_unicode_table():
    """openai/CLIP simple_tokenizer.py bytes_to_unicode: table order of the 256 bytes and the code point each stands for. (Data layout
    of the files transformers reads; the tokenizer itself is transformers'.)"""
    kept = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    order = kept + [b for b in range(256) if b not in kept]
    symbol = {b: b for b in kept}
    for n, b in enumerate(b for b in range(256) if b not in kept):
        symbol[b] = 256 + n
    return [chr(symbol[b]) for b in order]


def write_hf_files(gz_path, folder):
    text = gzip.open(gz_path).read().decode("utf-8")
    merges = [tuple(line.split()) for line in text.split("\n")[1:1 + MERGES]]
    assert len(merges) == MERGES and all(len(m) == 2 for m in merges), "not a CLIP merges file"
    symbols = bytes_to_unicode_table()
    vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    encoder = dict(zip(vocab, range(len(vocab))))
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(encoder, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(a + " " + b + "\n")
    with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"model_max_length": 77, "tokenizer_class": "CLIPTokenizer"}, f)
    return len(encoder), merges


def load_tokenizer(cls, folder, merges, pad_token):
    """from_pretrained on the local folder (what diffusers does); if this transformers cannot,
    its constructor from the same files (4.x: file paths, 5.x: vocab dict and merge list)."""
    try:
        return cls.from_pretrained(folder, local_files_only=True, pad_token=pad_token)
    except Exception as e:  # report and try the constructor
        print("from_pretrained failed (%s: %s); trying the constructor" % (type(e).__name__, e))
    vocab_file, merges_file = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")
    try:
        return cls(vocab_file, merges_file, pad_token=pad_token)
    except Exception as e:
        print("CLIPTokenizer(vocab_file, merges_file) failed (%s: %s); trying vocab=, merges=" % (type(e).__name__, e))
    with open(vocab_file, encoding="utf-8") as f:
        vocab = json.load(f)
    return cls(vocab=vocab, merges=list(merges), pad_token=pad_token)


def hand_prompts():
    p = [
        # worked examples (ids of openai/CLIP's tokenizer)
        "a photo of a cat", "A Photo of an ASTRONAUT riding a horse on Mars!",
        "masterpiece, best quality, 1girl", "don't", "hello!!! ", "café 123", "",
        # casing, apostrophes, contractions anywhere
        "HELLO World", "MiXeD CaSe WoRdS", "it's", "IT'S", "we're", "I've", "I'm", "you'll", "he'd",
        "'sun", "o'clock", "rock'n'roll", "''s", "'''", "can't won't shan't", "dog's toys' owners'",
        "\u2019s curly apostrophe", "it\u2019s", "l'\u00e9t\u00e9",
        # numbers
        "1234567890", "3.14159", "1,000,000", "2023-11-24", "x86_64", "100%", "$5.99", "#1", "1st 2nd 3rd 4th",
        "\u0661\u0662\u0663 arabic-indic digits", "\u2460\u2461\u2462 circled", "\u00bd \u00bc fractions",
        "\u216b roman twelve", "\uff11\uff12\uff13 fullwidth digits",
        # punctuation runs
        "!!!", "???", "...", ",,,", "a,b,c", "a, b, c", "(((x)))", "[[y]]", "{z}", "<tag>", "a--b", "a -- b",
        "foo_bar", "C++", "e-mail", "@user #hashtag", "\"quoted\"", "semi;colon:colon", "a/b\\c", "~`^|",
        "\u2014 em dash \u2013 en dash", "\u201cdouble curly\u201d", "\u00ab guillemets \u00bb", "\u2026",
        # whitespace runs and kinds
        "a  b", "a \t b", "a\nb", "a\r\nb", "  leading", "trailing  ", "   ", "\t", "\n\n\n",
        "a\u00a0b", "a\u3000b", "a\u2003b", "a\u2028b", "a\u2029b", "a\u0085b", "a\u200bb", "a\u180eb",
        "a\u000bb\u000cc", "a\u001cb\u001fc",
        # controls, NUL, replacement char, format chars
        "a\u0000b", "\u0000", "a\u0007b", "a\u001bb", "a\ufffdb", "\ufffd", "a\u200db", "a\u00adb",
        "a\ufeffb", "a\u0080b", "\u202eright-to-left override",
        # accents and normalisation
        "caf\u00e9", "cafe\u0301", "e\u0301", "\u00c5ngstr\u00f6m", "A\u030angstro\u0308m", "\u212b",
        "na\u00efve r\u00e9sum\u00e9", "\u00fcber Stra\u00dfe", "STRASSE \u1e9e", "\u0130stanbul", "I\u0307",
        "\u0131", "\u00d8resund", "\u0141\u00f3d\u017a", "\u0218tefan", "Ng\u01b0\u1eddi Vi\u1ec7t",
        "a\u0323\u0302", "a\u0302\u0323", "q\u0307\u0323", "\u1e0b\u0323", "\ufb01 ligature", "\u2126 ohm",
        # Greek, Cyrillic, others
        "\u039f\u0394\u039f\u03a3", "\u03bf\u03b4\u03bf\u03c3", "\u039f\u0394\u039f\u03a3 \u039f\u0394\u039f\u03a3",
        "\u03a3", "A\u03a3", "\u03a3A", "A\u03a3.", "A\u03a3'B", "\u0391\u0398\u0397\u039d\u0391 \u039a\u0391\u0399 \u03a3\u03a0\u0391\u03a1\u03a4\u0397",
        "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "\u05e9\u05dc\u05d5\u05dd", "\u0645\u0631\u062d\u0628\u0627",
        "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0",
        "\u0531\u0532\u0533 armenian", "\u13a0\u13a1 cherokee",
        # CJK, kana, hangul, fullwidth
        "\u732b", "\u732b\u732b", "\u732b \u732b", "\u4e00\u53ea\u732b\u5728\u7761\u89c9", "\u4e00\u53ea\u732bcat",
        "cat\u732bdog", "\u6771\u4eac\u30bf\u30ef\u30fc", "\u3072\u3089\u304c\u306a", "\u30ab\u30bf\u30ab\u30ca",
        "\ud55c\uad6d\uc5b4 \ubb38\uc7a5", "\u1100\u1161\u11a8", "\uff21\uff22\uff23 fullwidth", "\uff8a\uff9d\uff76\uff78",
        "\uf900 compatibility ideograph", "\U00020000 extension B", "\u3400 extension A", "\u3002\u3001\uff01",
        # emoji
        "\U0001f600", "\U0001f600\U0001f600\U0001f600", "cat \U0001f431 dog \U0001f436", "\U0001f44d\U0001f3fd",
        "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f1ef\U0001f1f5", "\u2764\ufe0f", "\u2b50 star",
        "#\ufe0f\u20e3", "\U0001f9d1\u200d\U0001f680 astronaut",
        # HTML entities (unescaped only by ftfy/openai's basic_clean, not by transformers without ftfy)
        "&amp;", "rock &amp; roll", "&lt;b&gt;bold&lt;/b&gt;", "&quot;hi&quot;", "&#39;", "&#x263a;",
        "&amp;amp;", "AT&T", "a & b", "&nbsp;",
        # special tokens typed in the text
        "<|endoftext|>", "<|startoftext|>", "a <|endoftext|> b", "a<|endoftext|>b", "<|ENDOFTEXT|>",
        "<|EndOfText|> x", "<|startoftext|><|endoftext|>", "!<|endoftext|>", "<|endoftext|>>",
        "<|endoftext|", "|endoftext|>", "<|end of text|>", "<|\u017ftartoftext|>", "'\u017f x",
        # the SD2 pad token "!"
        "! !! !!!", "hello!", "!hello!", "wow!!!1", "!", "a!b",
        # A1111 syntax is plain text to the tokenizer
        "(masterpiece:1.2), [blurry], ((best quality))", "a BREAK b", "\\(escaped\\)",
        # long single words
        "Supercalifragilisticexpialidocious", "pneumonoultramicroscopicsilicovolcanoconiosis",
        "a" * 200, "ab" * 150, "xyz" * 100, "\u732b" * 50, "\U0001f600" * 40, "!" * 120, "." * 300,
        "1" * 100, "\u00e9" * 80,
    ]
    return p


def generated_prompts(rng):
    words = ("a photo portrait of the an astronaut riding horse on mars cat dog landscape mountain "
             "river sunset golden hour cinematic lighting 8k uhd highly detailed masterpiece best "
             "quality trending artstation octane render bokeh depth field 35mm f/1.8 by greg "
             "rutkowski alphonse mucha wlop studio ghibli unreal engine 5 hdr vibrant colors moody "
             "dark fantasy sci-fi cyberpunk city neon rain reflections").split()
    extras = ["caf\u00e9", "na\u00efve", "\u732b", "\u6771\u4eac", "\U0001f431", "\u0130", "\u039f\u0394\u039f\u03a3",
              "don't", "it's", "1girl", "(red:1.3)", "[blue]", "&amp;", "<|endoftext|>", "!!", "\u00a0",
              "\u2014", "x2", "3.5", "e\u0301", "\uff21", "\u3000", "\t", "\u0000", "\u200b"]
    seps = [" ", ", ", ",", "  ", " , ", "\n", " | ", "; ", "-", ""]
    out = []
    for i in range(360):
        n = rng.randint(1, 30) if i % 6 else rng.randint(60, 160)  # every sixth is > 77 tokens
        parts = [rng.choice(extras) if rng.random() < 0.12 else rng.choice(words) for _ in range(n)]
        if rng.random() < 0.3:
            parts = [p.upper() if rng.random() < 0.5 else p.capitalize() for p in parts]
        out.append(rng.choice(seps).join(parts))
    # random code points from assigned ranges (letters, marks, numbers, symbols, punctuation)
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x2100, 0x214F),
              (0x3000, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xACFF), (0xFF00, 0xFFEF), (0x1F300, 0x1F64F)]
    for _ in range(160):
        s = []
        for _ in range(rng.randint(1, 40)):
            lo, hi = rng.choice(ranges)
            s.append(chr(rng.randint(lo, hi)))
        out.append("".join(s))
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_tokenizer_fixtures.py VOCAB_GZ OUTPUT_JSON")
    gz_path, out_path = sys.argv[1], sys.argv[2]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sys.modules["ftfy"] = None  # `import ftfy` raises ImportError: transformers 4 takes its ftfy-less path
    import transformers
    from transformers import CLIPTokenizer
    try:
        import tokenizers
        tokenizers_version = tokenizers.__version__
    except ImportError:
        tokenizers_version = None

    t0 = time.time()
    theirs = None
    for module in ("transformers.models.clip.tokenization_clip", "transformers.convert_slow_tokenizer",
                   "transformers.models.gpt2.tokenization_gpt2"):
        try:
            theirs = __import__(module, fromlist=["bytes_to_unicode"]).bytes_to_unicode()
            break
        except (ImportError, AttributeError):
            continue
    if theirs is not None:
        same = list(theirs.values()) == bytes_to_unicode_table()
        print("check bytes_to_unicode (%s) %s" % (module, "ok" if same else "DIFFERENT"))
        if not same:
            sys.exit("transformers' bytes_to_unicode differs from openai/CLIP's table; the vocab.json written would be wrong")
    else:
        print("check bytes_to_unicode: not found in this transformers; openai/CLIP's table used")
    with tempfile.TemporaryDirectory() as folder:
        vocab_size, merges = write_hf_files(gz_path, folder)
        sd1 = load_tokenizer(CLIPTokenizer, folder, merges, "<|endoftext|>")
        sd2 = load_tokenizer(CLIPTokenizer, folder, merges, "!")
    fast = bool(getattr(sd1, "is_fast", False)) or hasattr(sd1, "backend_tokenizer")
    flavour = "tokenizers" if fast else "python-basic"
    if not fast and getattr(sd1, "fix_text", None) is not None:
        sys.exit("transformers 4 is using ftfy despite the block; refusing to write a fixture")
    checks = {
        "vocab entries": (len(sd1), vocab_size),
        "a</w> id": (sd1.convert_tokens_to_ids("a</w>"), 320),
        "bos id": (sd1.bos_token_id, 49406),
        "eos id": (sd1.eos_token_id, 49407),
        "sd1 pad id": (sd1.pad_token_id, 49407),
        "sd2 pad id": (sd2.pad_token_id, 0),
    }
    for name, (got, want) in checks.items():
        print("check %-12s %-8s %s" % (name, got, "ok" if got == want else "DIFFERENT (expected %s)" % want))

    prompts = hand_prompts() + generated_prompts(random.Random(20241124))
    cases = []
    for i, text in enumerate(prompts):
        case = {"text": text}
        for name, tok in (("sd1", sd1), ("sd2", sd2)):
            case[name + "_ids"] = tok(text, add_special_tokens=False)["input_ids"]
        # The framed rows (77 ids each) for every fourth prompt and every one over 75 tokens,
        # to keep the file small; framing does not depend on the text beyond its ids.
        if i % 4 == 0 or len(case["sd1_ids"]) > 75 or len(case["sd2_ids"]) > 75:
            for name, tok in (("sd1", sd1), ("sd2", sd2)):
                case[name + "_framed"] = tok(text, padding="max_length", max_length=77, truncation=True)["input_ids"]
        cases.append(case)

    spec = {"a photo of a cat": [320, 1125, 539, 320, 2368], "don't": [847, 713], "hello!!! ": [3306, 995],
            "café 123": [15304, 272, 273, 274],
            "masterpiece, best quality, 1girl": [12066, 267, 949, 3027, 267, 272, 1611]}
    for c in cases:
        if c["text"] in spec:
            ok = c["sd1_ids"] == spec[c["text"]]
            print("worked example %-36r %s" % (c["text"], "ok" if ok else "DIFFERENT: %s" % c["sd1_ids"]))

    sha = hashlib.sha256(open(gz_path, "rb").read()).hexdigest()
    doc = {
        "generator": "tools/reference/make_tokenizer_fixtures.py",
        "flavour": flavour,
        "tokenizer_class": type(sd1).__module__ + "." + type(sd1).__name__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers_version,
        "python": platform.python_version(),
        "vocab_gz_sha256": sha,
        "sd1": {"pad_token": "<|endoftext|>", "pad_id": sd1.pad_token_id},
        "sd2": {"pad_token": "!", "pad_id": sd2.pad_token_id},
        "cases": cases,
    }
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="ascii") as f:
        head = {k: v for k, v in doc.items() if k != "cases"}
        f.write(json.dumps(head, ensure_ascii=True)[:-1] + ',\n"cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=True, separators=(",", ":")) for c in cases))
        f.write("\n]}\n")
    longest = max(len(c["sd1_ids"]) for c in cases)
    over = sum(len(c["sd1_ids"]) > 75 for c in cases)
    differ = sum(c["sd1_ids"] != c["sd2_ids"] for c in cases)
    print("%s: %d prompts (%d over 75 tokens, longest %d), flavour %s, %s, transformers %s, tokenizers %s, "
          "%d where the '!' pad token changes the ids; %.1f s"
          % (out_path, len(cases), over, longest, flavour, doc["tokenizer_class"], transformers.__version__,
             tokenizers_version, differ, time.time() - t0))


if __name__ == "__main__":
    main()
