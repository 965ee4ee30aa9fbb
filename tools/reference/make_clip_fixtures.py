#!/usr/bin/env python3
"""Reference outputs for Tessera's CLIP text encoder (core/models/clip/ClipText*) from transformers' CLIPTextModel.

    PYTHONPATH=/path/to/diffusers/src python3 tools/reference/make_clip_fixtures.py OUTDIR

OUTDIR belongs at tests/data/clip. Needs torch, transformers (4.x or 5.x), safetensors; no network,
no pickle. Every model is built from a config dict with a fixed seed, in float32 on the CPU, with
deterministic algorithms and one thread, so two runs with the same library versions write the same
numbers.

Cases (transformers models/clip/modeling_clip.py CLIPTextModel; ids are framed as SD's tokenizers frame them,
BOS, content cut to 75, EOS, padding to 77 as CLIPTokenizer(max_length=77) does, with a small vocabulary:
BOS = 998 and EOS = 999 stand for 49406 / 49407, the largest ids):
  sd1      quick_gelu, 3 layers, pad = EOS (SD 1.x tokenizer/)
  sd2      gelu, 3 layers, pad = 0 after the first EOS (SD 2.x tokenizer/); the penultimate layer
           (clip skip 1, diffusers: final_layer_norm(hidden_states[-2])) is written as well
  eos_mid  quick_gelu, 2 layers, eos_token_id 500 (not the largest id) and ids above 500 before the
           first 500, so pooling at "first position equal to eos_token_id" differs from pooling at
           argmax(ids). Every case has eos_token_id != 2: transformers' legacy argmax rule (config
           eos_token_id == 2, CLIPTextTransformer.forward's pooling) is spelled differently across versions for ids that do not
           contain 49407, so it is checked by hand in tests/core/tst_cliptext.cpp instead.

Outputs per case, under OUTDIR/<case>/:
  text_encoder/config.json, text_encoder/model.safetensors   (CLIPTextModel.save_pretrained)
  inputs.safetensors    input_ids [B,77] int64
  outputs.safetensors   last_hidden_state [B,77,D], hidden_states.<k> [B,77,D] for k = 0..N
                        (0 = embeddings, k = output of layer k, the last one without final LN),
                        pooler_output [B,D], skip1_normed [B,77,D] = final_layer_norm(hidden_states[N-1])
and OUTDIR/clip_cases.json describing the cases (config, ids, the pooled position transformers used
per row, tensor names and shapes of the weights file, library versions).

The random init of CLIPTextModel leaves biases at 0 and LayerNorm weights at 1, so after building,
every parameter is redrawn from the seeded generator (biases and LN parameters non-trivial), so a
loader that swapped or dropped a bias would not match.
"""
import json
import os
import platform
import sys

SEQ = 77
BOS, EOS = 998, 999
VOCAB = 1000

BASE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, projection_dim=32,
            num_attention_heads=4, max_position_embeddings=SEQ, layer_norm_eps=1e-5,
            attention_dropout=0.0, initializer_range=0.02, initializer_factor=1.0,
            bos_token_id=BOS, pad_token_id=1)

CASES = {
    "sd1": dict(BASE, num_hidden_layers=3, hidden_act="quick_gelu", eos_token_id=EOS),
    "sd2": dict(BASE, num_hidden_layers=3, hidden_act="gelu", eos_token_id=EOS),
    "eos_mid": dict(BASE, num_hidden_layers=2, hidden_act="quick_gelu", eos_token_id=500),
}


def frame(content, pad, eos=EOS):
    """BOS + content (cut to 75) + EOS, padded to 77 with `pad` (CLIPTokenizer with padding="max_length", max_length=77)."""
    row = [BOS] + list(content[:SEQ - 2]) + [eos]
    return row + [pad] * (SEQ - len(row))


def case_ids(name, rng):
    def words(n, lo=1, hi=BOS - 1):
        return [int(rng.randint(lo, hi)) for _ in range(n)]

    if name == "sd1":
        return [frame(words(5), EOS), frame([], EOS), frame(words(80), EOS)]
    if name == "sd2":
        return [frame(words(7), 0), frame([], 0), frame(words(75), 0)]
    # eos_mid: tokens above 500 before the first 500; a second 500 later; 999 after the EOS
    a = [700, 999, 42, 650] + [500] + [3, 999, 500] + [999] * (SEQ - 9)
    b = [BOS] + words(30, 501, BOS) + [500] + words(SEQ - 32, 1, 500)
    return [[BOS] + a[:SEQ - 1], b]


def redraw_parameters(model, torch, gen):
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "layer_norm" in name and name.endswith(".weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif "embedding" in name:
                p.copy_(0.5 * noise)
            else:  # Linear weight [out, in]
                p.copy_(noise / float(p.shape[1]) ** 0.5)


def pooled_rows(torch, last, pooled):
    """The sequence position whose last_hidden_state row equals the pooled row, per batch row."""
    out = []
    for b in range(last.shape[0]):
        match = [j for j in range(last.shape[1]) if torch.equal(last[b, j], pooled[b])]
        if not match:
            print("WARNING: pooled row %d is no row of last_hidden_state" % b)
        out.append(match[0] if match else -1)
    return out


def run_case(name, cfg_dict, outdir, torch, transformers, save_file, seed):
    torch.manual_seed(seed)
    import random
    rng = random.Random(seed)
    cfg = transformers.CLIPTextConfig(**cfg_dict)
    model = transformers.CLIPTextModel(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    redraw_parameters(model, torch, gen)

    folder = os.path.join(outdir, name)
    te = os.path.join(folder, "text_encoder")
    os.makedirs(te, exist_ok=True)
    model.save_pretrained(te)  # safetensors is the default in transformers >= 4.35 and the only form in 5.x
    assert os.path.isfile(os.path.join(te, "model.safetensors")), "save_pretrained wrote no model.safetensors"

    ids = torch.tensor(case_ids(name, rng), dtype=torch.int64)
    assert ids.shape[1] == SEQ and int(ids.max()) < VOCAB
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
        hs = out.hidden_states
        n = cfg.num_hidden_layers
        assert len(hs) == n + 1, "expected %d hidden states, got %d" % (n + 1, len(hs))
        # transformers >= 5.6 may flatten CLIPTextModel (no `text_model` submodule)
        final_ln = getattr(model, "text_model", model).final_layer_norm
        skip1 = final_ln(hs[-2])
        # CLIPTextTransformer.forward: last_hidden_state = final_layer_norm(hidden_states[-1]); recorded, not asserted,
        # so a transformers that differs still writes its fixtures and the C++ test names the difference
        last_is_prenorm = bool(torch.allclose(final_ln(hs[-1]), out.last_hidden_state, atol=1e-6))
        if not last_is_prenorm:
            print("WARNING %s: hidden_states[-1] is not the input of final_layer_norm" % name)

    tensors = {"last_hidden_state": out.last_hidden_state.contiguous(),
               "pooler_output": out.pooler_output.contiguous(),
               "skip1_normed": skip1.contiguous()}
    for k, h in enumerate(hs):
        tensors["hidden_states.%d" % k] = h.contiguous()
    save_file(tensors, os.path.join(folder, "outputs.safetensors"))
    save_file({"input_ids": ids.contiguous()}, os.path.join(folder, "inputs.safetensors"))

    pool_at = pooled_rows(torch, out.last_hidden_state, out.pooler_output)
    rows = ids.tolist()
    eos = cfg_dict["eos_token_id"]
    first_eos = [r.index(eos) if eos in r else 0 for r in rows]
    argmax = [r.index(max(r)) for r in rows]
    if pool_at != first_eos:
        print("WARNING %s: transformers pooled at %s, the first eos is at %s" % (name, pool_at, first_eos))

    from safetensors import safe_open
    with safe_open(os.path.join(te, "model.safetensors"), framework="pt") as f:
        weights = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    with open(os.path.join(te, "config.json"), encoding="utf-8") as f:
        saved_config = json.load(f)
    print("%s: %d weight tensors, %d parameters, pooled at %s (argmax at %s), |last| max %.4f"
          % (name, len(weights), sum(p.numel() for p in model.parameters()), pool_at, argmax,
             float(out.last_hidden_state.abs().max())))
    return {"config": cfg_dict, "saved_config": saved_config, "seed": seed, "input_ids": rows,
            "pool_index": pool_at, "first_eos_index": first_eos, "argmax_index": argmax,
            "last_hidden_state_is_final_ln_of_last_hidden_states_entry": last_is_prenorm,
            "layers": cfg.num_hidden_layers,
            "weights": weights, "outputs": sorted(tensors)}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_clip_fixtures.py OUTDIR")
    outdir = sys.argv[1]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import transformers
    from safetensors.torch import save_file

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(outdir, exist_ok=True)
    cases = {}
    for i, (name, cfg) in enumerate(CASES.items()):
        cases[name] = run_case(name, cfg, outdir, torch, transformers, save_file, seed=1500 + i)
    meta = {"script": "tools/reference/make_clip_fixtures.py", "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(),
            "seq": SEQ, "bos": BOS, "eos": EOS, "cases": cases}
    with open(os.path.join(outdir, "clip_cases.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
    total = 0
    for root, _, files in os.walk(outdir):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print("wrote %s: %d bytes in total" % (outdir, total))
    assert total < 2_000_000, "fixtures too large"


if __name__ == "__main__":
    main()
