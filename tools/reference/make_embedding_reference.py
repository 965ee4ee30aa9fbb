"""Reference conditioning of prompts holding textual-inversion embeddings, as A1111 computes it, on the
tiny SD 1.x text encoder of tests/data/sdpipeline/sd1 (transformers CLIPTextModel, float32, CPU).

A1111's steps transcribed: modules/sd_hijack_clip.py FrozenCLIPEmbedderWithCustomWordsBase.tokenize_line
(75-token chunks, comma backtracking 20, embeddings placed with id 0 and moved to the next chunk when
they do not fit), modules/sd_hijack.py EmbeddingsWithFixes.forward (a forward hook on the token
embedding replacing rows offset+1.. with the vectors), modules/sd_emphasis.py EmphasisOriginal, clip skip
(hidden_states[-n] then final_layer_norm). Segments are given already parsed (parse_prompt_attention's
output) so that no emphasis parser is needed here.

    python3 tools/reference/make_embedding_reference.py INPUTS OUTDIR

INPUTS holds tokenizer/ (vocab.json, merges.txt: the bundled CLIP vocabulary written by
make_tokenizer_fixtures.py write_hf_files), text_encoder/ (tests/data/sdpipeline/sd1/text_encoder) and
embeddings/ (embparams.safetensors and a1111.pt: tests/data/embeddings/good/ti-embparams.safetensors and
ti-a1111.pt). OUTDIR receives reference.safetensors and reference.json, committed as
tests/data/embeddings/reference/. Needs PyTorch, transformers and safetensors (the GPU machine; CPU is
enough).
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import CLIPTextModel, CLIPTokenizer

HERE = sys.argv[1]

# vocab.json and merges.txt made from openai's bpe_simple_vocab_16e6.txt.gz as SimpleTokenizer builds its ids.
tokenizer = CLIPTokenizer.from_pretrained(os.path.join(HERE, "tokenizer"))
try:
    model = CLIPTextModel.from_pretrained(os.path.join(HERE, "text_encoder"), dtype=torch.float32).eval()
except TypeError:  # transformers < 4.56 spells it torch_dtype
    model = CLIPTextModel.from_pretrained(os.path.join(HERE, "text_encoder"), torch_dtype=torch.float32).eval()


def module_named(root, suffix):
    """The one submodule whose dotted name is `suffix` or ends in "." + suffix (transformers 5 may have
    flattened CLIPTextModel's text_model)."""
    found = [m for n, m in root.named_modules() if n == suffix or n.endswith("." + suffix)]
    if len(found) != 1:
        raise RuntimeError(f"{len(found)} modules named {suffix}: " + ", ".join(n for n, _ in root.named_modules()))
    return found[0]


token_embedding = model.get_input_embeddings()
if not isinstance(token_embedding, torch.nn.Embedding) or token_embedding.weight.shape[0] != 49408:
    token_embedding = module_named(model, "token_embedding")
final_layer_norm = module_named(model, "final_layer_norm")
id_start, id_end = tokenizer.bos_token_id, tokenizer.eos_token_id
comma = tokenizer.get_vocab()[",</w>"]
CHUNK = 75
BACKTRACK = 20

embeddings = {
    "embparams": load_file(os.path.join(HERE, "embeddings/embparams.safetensors"))["emb_params"].float(),
    "a1111": torch.load(os.path.join(HERE, "embeddings/a1111.pt"), map_location="cpu")["string_to_param"]["*"].float(),
}
ids_lookup = {}
for name, vec in embeddings.items():
    ids = tokenizer([name], add_special_tokens=False)["input_ids"][0]
    ids_lookup.setdefault(ids[0], []).append((ids, name))
for k in ids_lookup:
    ids_lookup[k] = sorted(ids_lookup[k], key=lambda x: len(x[0]), reverse=True)


def find_at(tokens, offset):
    for ids, name in ids_lookup.get(tokens[offset], []):
        if tokens[offset:offset + len(ids)] == ids:
            return name, len(ids)
    return None, None


def tokenize_line(parsed):
    tokenized = tokenizer([t for t, _ in parsed], truncation=False, add_special_tokens=False)["input_ids"]
    chunks, state = [], {"tokens": [], "mults": [], "fixes": [], "last_comma": -1, "count": 0}

    def next_chunk(is_last=False):
        state["count"] += len(state["tokens"]) if is_last else CHUNK
        to_add = CHUNK - len(state["tokens"])
        if to_add > 0:
            state["tokens"] += [id_end] * to_add
            state["mults"] += [1.0] * to_add
        chunks.append(([id_start] + state["tokens"] + [id_end], [1.0] + state["mults"] + [1.0], state["fixes"]))
        state.update(tokens=[], mults=[], fixes=[], last_comma=-1)

    for tokens, (text, weight) in zip(tokenized, parsed):
        if text == "BREAK" and weight == -1:
            next_chunk()
            continue
        position = 0
        while position < len(tokens):
            token = tokens[position]
            if token == comma:
                state["last_comma"] = len(state["tokens"])
            elif (BACKTRACK != 0 and len(state["tokens"]) == CHUNK and state["last_comma"] != -1
                  and len(state["tokens"]) - state["last_comma"] <= BACKTRACK):
                at = state["last_comma"] + 1
                reloc_t, reloc_m = state["tokens"][at:], state["mults"][at:]
                state["tokens"], state["mults"] = state["tokens"][:at], state["mults"][:at]
                next_chunk()
                state["tokens"], state["mults"] = reloc_t, reloc_m
            if len(state["tokens"]) == CHUNK:
                next_chunk()
            name, length = find_at(tokens, position)
            if name is None:
                state["tokens"].append(token)
                state["mults"].append(weight)
                position += 1
                continue
            n = embeddings[name].shape[0]
            if len(state["tokens"]) + n > CHUNK:
                next_chunk()
            state["fixes"].append((len(state["tokens"]), name))
            state["tokens"] += [0] * n
            state["mults"] += [weight] * n
            position += length
    if state["tokens"] or not chunks:
        next_chunk(is_last=True)
    return chunks, state["count"]


def encode_chunk(tokens, mults, fixes, clip_skip):
    def hook(module, inputs, output):
        out = output.clone()
        for offset, name in fixes:
            emb = embeddings[name]
            n = min(out.shape[1] - offset - 1, emb.shape[0])
            out[0, offset + 1:offset + 1 + n] = emb[:n]
        return out

    handle = token_embedding.register_forward_hook(hook)
    try:
        with torch.no_grad():
            outputs = model(input_ids=torch.tensor([tokens]), output_hidden_states=True)
    finally:
        handle.remove()
    if clip_skip > 1:
        z = final_layer_norm(outputs.hidden_states[-clip_skip])
    else:
        z = outputs.last_hidden_state
    with torch.no_grad():
        m = torch.tensor([mults])
        original_mean = z.mean()
        z = z * m.reshape(m.shape + (1,)).expand(z.shape)
        z = z * (original_mean / z.mean())
    return z[0]


CASES = [
    {"name": "inline", "prompt": "a (embparams:1.2) on grass, a1111",
     "segments": [["a ", 1.0], ["embparams", 1.2], [" on grass, a1111", 1.0]], "clip_skip": 1},
    {"name": "clipskip2", "prompt": "a (embparams:1.2) on grass, a1111",
     "segments": [["a ", 1.0], ["embparams", 1.2], [" on grass, a1111", 1.0]], "clip_skip": 2},
    {"name": "moved", "prompt": "cat " * 73 + "a1111", "segments": [["cat " * 73 + "a1111", 1.0]], "clip_skip": 1},
    {"name": "backtrack", "prompt": "cat " * 70 + ", embparams cat cat cat",
     "segments": [["cat " * 70 + ", embparams cat cat cat", 1.0]], "clip_skip": 1},
]


def main(out):
    os.makedirs(out, exist_ok=True)
    tensors, cases = {}, []
    for c in CASES:
        chunks, count = tokenize_line([tuple(s) for s in c["segments"]])
        zs = [encode_chunk(t, m, f, c["clip_skip"]) for t, m, f in chunks]
        tensors[c["name"]] = torch.cat(zs).contiguous()
        cases.append({**c, "chunks": len(chunks), "token_count": count,
                      "ids": [t for t, _, _ in chunks], "fixes": [[[o, n] for o, n in f] for _, _, f in chunks]})
    save_file(tensors, os.path.join(out, "reference.safetensors"))
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"generator": "reference.py (transformers CLIPTextModel, A1111's steps transcribed)",
                   "torch": torch.__version__, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[2])
