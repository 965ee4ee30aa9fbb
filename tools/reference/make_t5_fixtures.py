#!/usr/bin/python3
"""Reference outputs for Tessera's T5 v1.1 encoder (core/models/t5/) and its SentencePiece tokenizer
(core/text/T5Tokenizer) from transformers' T5EncoderModel, T5TokenizerFast and T5Tokenizer.

    python3 tools/reference/make_t5_fixtures.py tests/data/t5

Run from the repository root; OUTDIR (tests/data/t5) must already hold spiece.model (committed, see
below). Needs torch, transformers (4.x or 5.x), sentencepiece, safetensors; no network, no pickle.
The model is built from a config dict with a fixed seed on the CPU, with deterministic algorithms and
one thread, so two runs with the same library versions write the same numbers.

Encoder (transformers models/t5/modeling_t5.py, T5EncoderModel; the tiny config of the FLUX
specification's reference checks: vocab 101, d_model 40, d_kv 12, 5 heads (inner 60 != d_model), d_ff 72,
3 layers, gated-gelu, 32 buckets, max distance 128). Every parameter is redrawn from a seeded generator
(T5's init leaves the RMSNorm weights at 1, which would hide a swapped norm). Inputs: 2 rows of 300 ids
(random ids, and a prompt-like row: ids, EOS 1, then pad 0 like the FLUX pipelines feed it), called
with attention_mask=None like the FLUX pipelines. The forward runs in float64 (the reference) and in
float32 (its difference is recorded); outputs are stored as F32.

Outputs under OUTDIR:
  encoder/config.json, encoder/model.safetensors   T5EncoderModel.save_pretrained(safe_serialization=True)
  t5_outputs.safetensors   input_ids [2,300] (F32), last_hidden_state [2,300,40] (float64 forward),
                           hidden_states.<k> [2,300,40] for k = 0..2 (transformers' output_hidden_states
                           without its last entry, which is last_hidden_state: 0 = the embeddings,
                           k = the output of block k-1), buckets [300,300] (F32, the bucket
                           of memory j minus query i from T5Attention._relative_position_bucket)
  t5_cases.json            library versions, the config, the bucket test vector, the float32-vs-float64
                           difference, and the tokenizer cases.

Tokenizer: spiece.model is a tiny unigram model trained here with Debian's spm_train (sentencepiece
0.1.97) on tests/data/t5/spiece_corpus.txt (a text written for this purpose; no prompt below is in it):

    spm_train --input=tests/data/t5/spiece_corpus.txt --model_prefix=spiece --model_type=unigram \
      --vocab_size=400 --character_coverage=1.0 --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1 \
      --num_threads=1 --seed_sentencepiece_size=100000

(pad 0, eos 1, unk 2 and no BOS as in T5's spiece.model; the default nmt_nfkc normalizer, whose
precompiled charsmap is most of the file.) Training with one thread gives the same file each time.
Each held-out prompt is tokenized with padding="max_length", truncation=True, max_length 64 and 16 by
the tokenizers pipeline that transformers' T5 converter writes into tokenizer.json for this spiece.model
(t5_fast_tokenizer below: the layout of ComfyUI's comfy/text_encoders/t5_tokenizer/tokenizer.json, the
T5-XXL tokenizer of its SD3 and FLUX text encoders), with prepend_scheme "first" (legacy=False,
as that file) and "always" (legacy=True, transformers' default), both checked by tests/core/tst_t5.cpp,
framed by hand and through transformers' PreTrainedTokenizerFast (asserted equal); by transformers'
own T5TokenizerFast / T5Tokenizer where the installed version builds them from spiece.model
(transformers 5's T5Tokenizer ignores vocab_file, so from_pretrained on a folder holding it is tried;
an error string is recorded when neither reads it); and by plain sentencepiece (encode, no special
tokens) for diagnosis.
"""
import json
import os
import platform
import sys
import tempfile
import shutil

SEQ = 300
CONFIG = dict(vocab_size=101, d_model=40, d_kv=12, num_heads=5, d_ff=72, num_layers=3,
              relative_attention_num_buckets=32, relative_attention_max_distance=128,
              feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6, dropout_rate=0.0,
              is_encoder_decoder=False, use_cache=False, pad_token_id=0, eos_token_id=1,
              decoder_start_token_id=0)

# r = j - i -> bucket (the FLUX specification's test vector for 32 buckets, max distance 128)
BUCKET_VECTOR = [-200, -128, -64, -32, -16, -9, -8, -7, -1, 0, 1, 7, 8, 11, 12, 16, 23, 32, 64, 127, 511]

LONG = ("A very long prompt about a lighthouse, a castle, a dragon and a garden, repeated so that it "
        "needs more pieces than the maximum length allows. ") * 6
PROMPTS = [
    "A castle on a hill at sunset, oil painting",
    "Crème brûlée, jalapeño, Zürich, naïve café and déjà vu",
    "Ünïcödé: ß, ø, æ, œ, ñ, ç, Ω, π, λ, 東京, Москва",
    "A cat 🐱 riding a 🚲 under the 🌙!",
    "tabs\tand\nnewlines\r\nhere\t\tand\n\nthere",
    "   leading spaces",
    "trailing spaces   ",
    "multiple    spaces   between  words",
    "  both  ",
    " ",
    "",
    "<extra_id_0>",
    "fill <extra_id_0> the <extra_id_1> blanks<extra_id_99>",
    "x<extra_id_0>y <extra_id_17> z",
    "<extra_id_100> is not a sentinel here",
    "special words </s> and <pad> and <unk> inside",
    "Room 101, 3.5 kg, 2024-11-29, $19.99, 50% off, 1,000,000",
    "ＡＢＣ １２３ fullwidth ｶﾀｶﾅ and ligature ﬁne",
    "\u2581already underlined \u2581 word",
    "supercalifragilisticexpialidociousandevenlongerwordwithoutanyspaces",
    LONG,
]
MAX_LENGTHS = [64, 16]


def redraw_parameters(model, torch, gen):
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)
            if "layer_norm" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif "relative_attention_bias" in name:
                p.copy_(1.0 * noise)
            elif "shared" in name or "embed_tokens" in name:
                p.copy_(0.5 * noise)
            else:  # Linear weight [out, in], no biases in T5 v1.1
                p.copy_(noise / float(p.shape[1]) ** 0.5)


def make_ids(rng):
    a = [rng.randrange(0, CONFIG["vocab_size"]) for _ in range(SEQ)]
    a[0], a[1], a[-1] = 100, 0, 1
    content = [rng.randrange(2, CONFIG["vocab_size"]) for _ in range(37)]
    b = content + [1] + [0] * (SEQ - len(content) - 1)
    return [a, b]


def encoder_case(outdir, torch, transformers, save_file, seed):
    torch.manual_seed(seed)
    import random
    rng = random.Random(seed)
    cfg = transformers.T5Config(**CONFIG)
    model = transformers.T5EncoderModel(cfg).to(torch.float64).eval()
    gen = torch.Generator().manual_seed(seed)
    redraw_parameters(model, torch, gen)

    folder = os.path.join(outdir, "encoder")
    os.makedirs(folder, exist_ok=True)
    model32 = transformers.T5EncoderModel(cfg).to(torch.float32).eval()
    model32.load_state_dict({k: v.to(torch.float32) for k, v in model.state_dict().items()})
    model32.save_pretrained(folder, safe_serialization=True)
    assert os.path.isfile(os.path.join(folder, "model.safetensors")), "save_pretrained wrote no model.safetensors"

    ids = torch.tensor(make_ids(rng), dtype=torch.int64)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=None, output_hidden_states=True)
        out32 = model32(input_ids=ids, attention_mask=None)
    last = out.last_hidden_state
    diff32 = float((out32.last_hidden_state.double() - last).abs().max())

    attn = model.encoder.block[0].layer[0].SelfAttention
    pos = torch.arange(SEQ, dtype=torch.long)
    rel = pos[None, :] - pos[:, None]  # memory - query, as T5Attention.compute_bias
    bucket_fn = attn._relative_position_bucket
    buckets = bucket_fn(rel, bidirectional=True, num_buckets=32, max_distance=128)
    vector = bucket_fn(torch.tensor(BUCKET_VECTOR, dtype=torch.long), bidirectional=True, num_buckets=32,
                       max_distance=128).tolist()

    tensors = {"input_ids": ids.to(torch.float32).contiguous(),
               "last_hidden_state": last.to(torch.float32).contiguous(),
               "buckets": buckets.to(torch.float32).contiguous()}
    # the last entry is last_hidden_state itself (after the final norm): not stored twice
    for k, h in enumerate(out.hidden_states[:-1]):
        tensors["hidden_states.%d" % k] = h.to(torch.float32).contiguous()
    save_file(tensors, os.path.join(outdir, "t5_outputs.safetensors"))

    from safetensors import safe_open
    with safe_open(os.path.join(folder, "model.safetensors"), framework="pt") as f:
        weights = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    print("encoder: %d weight tensors, |last| max %.4f, float32 vs float64 max %.3g"
          % (len(weights), float(last.abs().max()), diff32))
    return {"config": CONFIG, "seed": seed, "seq": SEQ, "hidden_states": len(out.hidden_states),
            "last_hidden_state_abs_max": float(last.abs().max()),
            "float32_vs_float64_max_abs": diff32, "weights": weights,
            "bucket_vector": {"relative": BUCKET_VECTOR, "bucket": vector}}


def proto_field(data, number):
    """The bytes of the first length-delimited field `number` of a serialized protobuf message, or None.
    (A reader of the wire format, so the charsmap is taken from spiece.model without protobuf installed.)"""
    i = 0
    while i < len(data):
        key, i = varint(data, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, i = varint(data, i)
            if field == number:
                return data[i:i + n]
            i += n
        else:
            raise ValueError("unexpected protobuf wire type %d" % wire)
    return None


def varint(data, i):
    value, shift = 0, 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def t5_fast_tokenizer(sp, model_bytes, prepend_scheme):
    """The tokenizers pipeline transformers' T5 converter writes into tokenizer.json for spiece.model
    (convert_slow_tokenizer.py SpmConverter/T5Converter in transformers 4.x; the layout of ComfyUI's
    comfy/text_encoders/t5_tokenizer/tokenizer.json, its T5-XXL tokenizer for SD3 and FLUX): the model's
    precompiled charsmap, right strip, runs of spaces to one U+2581, Metaspace (prepend_scheme "first":
    legacy=False, as that file; "always": legacy=True), Unigram over the pieces and their scores, the
    sentinels <extra_id_99>..<extra_id_0> after the pieces, every special token an added token, and
    `X </s>`."""
    from tokenizers import AddedToken, Regex, Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram

    n = sp.get_piece_size()
    vocab = [(sp.id_to_piece(i), float(sp.get_score(i))) for i in range(n)]
    vocab += [("<extra_id_%d>" % i, 0.0) for i in range(99, -1, -1)]
    tok = Tokenizer(Unigram(vocab, unk_id=sp.unk_id(), byte_fallback=False))
    charsmap = proto_field(proto_field(model_bytes, 3) or b"", 2)  # ModelProto.normalizer_spec.precompiled_charsmap
    steps = [normalizers.Strip(left=False, right=True), normalizers.Replace(Regex(" {2,}"), "\u2581")]
    if charsmap:
        steps.insert(0, normalizers.Precompiled(charsmap))
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=prepend_scheme)
    specials = ["<pad>", "</s>", "<unk>"] + ["<extra_id_%d>" % i for i in range(99, -1, -1)]
    tok.add_special_tokens([AddedToken(t, single_word=False, lstrip=False, rstrip=False, normalized=False,
                                       special=True) for t in specials])
    tok.post_processor = processors.TemplateProcessing(single=["$A", "</s>"], pair=["$A", "</s>", "$B", "</s>"],
                                                       special_tokens=[("</s>", 1)])
    assert tok.token_to_id("<extra_id_0>") == n + 99 and tok.token_to_id("</s>") == 1
    return tok, bool(charsmap)


def frame(ids, max_length):
    """padding="max_length", truncation=True: the pieces cut to max_length - 1, EOS, pad 0."""
    ids = list(ids[:max_length - 1]) + [1]
    return ids + [0] * (max_length - len(ids))


def transformers_variants(transformers, vocab_file, pieces):
    """transformers' own T5 tokenizer classes, where the installed version builds them from spiece.model
    (transformers 5's T5Tokenizer ignores vocab_file and builds a 4-piece vocabulary: recorded as an error)."""
    made = {}
    tmp = tempfile.mkdtemp()
    shutil.copy(vocab_file, os.path.join(tmp, "spiece.model"))
    for name, cls_name, kw in [("transformers_fast", "T5TokenizerFast", {}),
                               ("transformers_fast_legacy_false", "T5TokenizerFast", {"legacy": False}),
                               ("transformers_slow_legacy_true", "T5Tokenizer", {"legacy": True}),
                               ("transformers_slow_legacy_false", "T5Tokenizer", {"legacy": False})]:
        cls = getattr(transformers, cls_name, None)
        errors = []
        tok = None
        for how in ("vocab_file", "from_pretrained"):
            if cls is None:
                errors.append("no class %s" % cls_name)
                break
            try:
                t = (cls(vocab_file=vocab_file, extra_ids=100, **kw) if how == "vocab_file"
                     else cls.from_pretrained(tmp, extra_ids=100, **kw))
            except Exception as e:  # noqa: BLE001
                errors.append("%s: %r" % (how, e))
                continue
            if t.vocab_size != pieces + 100 or t.convert_tokens_to_ids("<extra_id_0>") != pieces + 99:
                errors.append("%s: %s built a vocabulary of %d, not %d: it did not read spiece.model"
                              % (how, type(t).__name__, t.vocab_size, pieces + 100))
                continue
            tok = t
            break
        made[name] = (tok, type(tok).__name__ if tok is not None else "; ".join(errors))
        if tok is None:
            print("tokenizer %s: %s" % (name, made[name][1]))
    return made


def tokenizer_cases(outdir, transformers):
    vocab_file = os.path.join(outdir, "spiece.model")
    import sentencepiece as spm
    with open(vocab_file, "rb") as f:
        model_bytes = f.read()
    sp = spm.SentencePieceProcessor()
    sp.Load(vocab_file)
    pieces = sp.get_piece_size()
    fast = {}
    for scheme in ("first", "always"):
        tok, has_charsmap = t5_fast_tokenizer(sp, model_bytes, scheme)
        fast["fast_" + scheme] = tok
    wrapped = {}
    try:  # the same pipelines through transformers' padding and truncation
        for name, tok in fast.items():
            wrapped[name] = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>",
                                                                 unk_token="<unk>", pad_token="<pad>")
    except Exception as e:  # noqa: BLE001
        print("PreTrainedTokenizerFast(tokenizer_object=...): %r" % e)
        wrapped = {}
    theirs = transformers_variants(transformers, vocab_file, pieces)
    cases = []
    for prompt in PROMPTS:
        case = {"prompt": prompt, "sentencepiece": sp.encode(prompt),
                "sentencepiece_pieces": sp.encode(prompt, out_type=str),
                "fast_first_pieces": fast["fast_first"].encode(prompt, add_special_tokens=False).tokens,
                "ids": {}}
        for L in MAX_LENGTHS:
            per = {}
            for name, tok in fast.items():
                per[name] = frame(tok.encode(prompt, add_special_tokens=False).ids, L)
                if name in wrapped:
                    via = wrapped[name](prompt, padding="max_length", truncation=True, max_length=L,
                                        return_attention_mask=False)["input_ids"]
                    assert via == per[name], ("transformers' framing differs", name, prompt, via, per[name])
            for name, (tok, what) in theirs.items():
                if tok is None:
                    per[name] = {"error": what}
                    continue
                try:
                    per[name] = tok(prompt, padding="max_length", truncation=True, max_length=L,
                                    return_attention_mask=False)["input_ids"]
                except Exception as e:  # noqa: BLE001
                    per[name] = {"error": repr(e)}
            case["ids"][str(L)] = per
            ref = per["fast_first"]
            others = [n for n, v in per.items() if n != "fast_first" and isinstance(v, list) and v != ref]
            if others:
                print("L=%d %r: differs from fast_first in %s" % (L, prompt[:40], others))
        cases.append(case)
    classes = {name: what for name, (tok, what) in theirs.items()}
    return {"pieces": pieces, "classes": classes, "charsmap": has_charsmap,
            "framed_through_transformers": sorted(wrapped), "max_lengths": MAX_LENGTHS,
            "reference": "fast_first", "cases": cases}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_t5_fixtures.py OUTDIR (holding spiece.model)")
    outdir = sys.argv[1]
    if not os.path.isfile(os.path.join(outdir, "spiece.model")):
        sys.exit("%s/spiece.model is missing (see the docstring for how it is trained)" % outdir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import transformers
    from safetensors.torch import save_file

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    meta = {"script": "tools/reference/make_t5_fixtures.py", "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version()}
    try:
        import sentencepiece
        meta["sentencepiece"] = sentencepiece.__version__
    except Exception:  # noqa: BLE001
        pass
    try:
        import tokenizers
        meta["tokenizers"] = tokenizers.__version__
    except Exception:  # noqa: BLE001
        pass
    meta["encoder"] = encoder_case(outdir, torch, transformers, save_file, seed=2700)
    meta["tokenizer"] = tokenizer_cases(outdir, transformers)
    with open(os.path.join(outdir, "t5_cases.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, sort_keys=True, ensure_ascii=True)
    total = 0
    for root, _, files in os.walk(outdir):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print("wrote %s: %d bytes in total" % (outdir, total))
    assert total < 1_600_000, "fixtures too large"


if __name__ == "__main__":
    main()
