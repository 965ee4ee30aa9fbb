#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/) and the seeds that
today's parsers fail on (tests/fuzz/crashes/<target>/), standard library only:

  /usr/bin/python3 tests/fuzz/make_corpus.py

Real inputs are copied from the repository (presets, the test models' config.json and
scheduler_config.json, the init-image fixtures); small valid safetensors files and PNGs are
written here; then a few hostile ones per target (deep nesting, huge numbers, invalid UTF-8,
sizes that do not match, headers claiming huge images). The run manifest and run PNG seeds
(fuzz_manifest/run_manifest.json, fuzz_init_image/run.png, fuzz_png_read/run.png) come from
a real `tessera-cli render` (32x32, 2 steps, tests/data/models/cifar_like); this script
overwrites its own files and leaves those alone.
"""
import json
import os
import shutil
import struct
import zlib

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.normpath(os.path.join(here, "..", ".."))


# Seeds that today's parsers fail on (each a finding, see crashes/README.md): written to
# crashes/<target>/ instead, so the corpus replay passes and the finding stays reproducible.
# Move an entry back into the corpus once its parser is fixed.
FAILING_TODAY = set()  # every earlier finding is fixed; its reproducers are seeds now


def write(target, name, data):
    kind = "crashes" if (target, name) in FAILING_TODAY else "corpus"
    folder = os.path.join(here, kind, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def copy(target, name, source):
    with open(os.path.join(root, source), "rb") as f:
        write(target, name, f.read())


def nested(depth, inner="1"):
    return "[" * depth + inner + "]" * depth


# Shared hostile JSON: each target's reader must reject these with a clear message.
HOSTILE_JSON = {
    "deep_arrays.json": nested(3000),
    "deep_objects.json": '{"a":' * 1000 + "1" + "}" * 1000,
    "unclosed.json": "[" * 200,
    "invalid_utf8.json": b'{"label": "caf\xe9 \xff\xfe", "window": "\xc0\xaf"}',
    "raw_controls.json": b'{"label": "a\x00b\x1b[31m"}',
    "escaped_controls.json": r'{"window": "\u001b[31mred", "scheduler": "\u0000", "label": "\ud83d\ude00"}',
    "huge_numbers.json": '{"width": 1e400, "height": -1e400, "seed": 184467440737095516160, "steps": 9223372036854775808}',
    "not_object.json": '[1, "two", null, true]',
    "empty.json": "",
}


def hostile(target):
    for name, text in HOSTILE_JSON.items():
        write(target, name, text)


def run_settings():
    t = "fuzz_run_settings"
    for preset in sorted(os.listdir(os.path.join(root, "resources", "presets"))):
        copy(t, preset, os.path.join("resources", "presets", preset))
    write(t, "fraction_overlap.json", '{"overlap": "25%", "seed": "18446744073709551615", "tile": 128}')
    write(t, "float_overlap.json", '{"overlap": 0.125, "strength": 0.75, "init": "in.png", "preserve_color": true}')
    write(t, "scheduler_options.json", json.dumps({
        "scheduler": "euler", "scheduler_options": {"beta_schedule": "scaled_linear", "timestep_spacing": "trailing",
                                                    "prediction_type": "v_prediction", "use_karras_sigmas": False,
                                                    "eta": 0.5, "num_train_timesteps": 1000}}))
    write(t, "unknown_key.json", '{"widht": 512}')
    write(t, "wrong_types.json", '{"width": "512", "batch": [4], "graphs": 2, "label": {"a": 1}}')
    write(t, "value_escape.json", r'{"window": "h\u001b[2Jann"}')
    write(t, "long_key.json", '{"' + "k" * 3000 + '": 1}')
    hostile(t)


def manifest():
    t = "fuzz_manifest"
    write(t, "minimal.json", '{"schema_version": 1}')
    write(t, "nulls.json", '{"schema_version": 1, "steps": [{"step": 0, "gpu_ms": null}], "batches": '
                           '[{"tile_ids": [0, 1], "gpu_ms": null}], "memory": [{"t_ms": 1, "used_mib": null}]}')
    write(t, "newer_schema.json", '{"schema_version": 99, "config": {}}')
    write(t, "bad_config.json", '{"schema_version": 1, "config": {"tile": 0, "overlap": "1e308%"}}')
    write(t, "wide_ints.json", '{"schema_version": 1, "tile_count": 4294967296, "batches": [{"tile_ids": [-2147483649]}]}')
    hostile(t)


def model_config():
    t = "fuzz_model_config"
    for model in ("cifar_like", "heads_pad1"):
        copy(t, model + "_config.json", os.path.join("tests", "data", "models", model, "config.json"))
    copy(t, "default_config.json", os.path.join("resources", "models", "default", "config.json"))
    copy(t, "scheduler_config.json", os.path.join("tests", "data", "models", "cifar_like", "scheduler_config.json"))
    write(t, "use_default_values.json", '{"_use_default_values": ["block_out_channels"], "block_out_channels": [1]}')
    write(t, "sample_size_pair.json", '{"sample_size": [64, 32], "block_out_channels": [8, 8], '
                                      '"down_block_types": ["DownBlock2D", "DownBlock2D"], '
                                      '"up_block_types": ["UpBlock2D", "UpBlock2D"], "norm_num_groups": 8}')
    write(t, "huge_channels.json", '{"block_out_channels": [1000000000], "down_block_types": ["DownBlock2D"], '
                                   '"up_block_types": ["UpBlock2D"], "attention_head_dim": null, "norm_num_groups": 1}')
    write(t, "many_levels.json", json.dumps({"block_out_channels": [32] * 40, "down_block_types": ["DownBlock2D"] * 40,
                                             "up_block_types": ["UpBlock2D"] * 40}))
    write(t, "block_name_escape.json", r'{"down_block_types": ["Down\u001b[2JBlock2D"]}')
    write(t, "long_value_dump.json", json.dumps({"down_block_types": ["DownBlock2D"] * 100 + ["X"]}))
    write(t, "scheduler_enum_escape.json", r'{"beta_schedule": "lin\u001b[2Jear"}')
    write(t, "scheduler_euler.json", '{"_class_name": "EulerDiscreteScheduler", "beta_schedule": "scaled_linear", '
                                     '"timestep_spacing": "leading", "use_karras_sigmas": true, "steps_offset": 1}')
    hostile(t)


def safetensors_file(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape, bytes)] laid out in order."""
    header, offset, data = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(payload)]}
        offset += len(payload)
        data += payload
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors():
    t = "fuzz_safetensors"
    # First byte odd: the rest is the whole file. Even: header then data, length prepended.
    whole = lambda name, data: write(t, name, b"\x01" + data)
    whole("f32_f16_bf16.safetensors", safetensors_file([
        ("conv_in.weight", "F32", [2, 1, 1, 1], struct.pack("<2f", 1.5, -2.0)),
        ("conv_in.bias", "F16", [2], struct.pack("<2H", 0x3C00, 0xC000)),
        ("time_embedding.linear_1.weight", "BF16", [], struct.pack("<H", 0x3F80))], {"format": "pt"}))
    whole("int_and_bool.safetensors", safetensors_file([
        ("ids", "I64", [2], struct.pack("<2q", 1, -1)), ("mask", "BOOL", [3], b"\x01\x00\x01"),
        ("packed", "F4", [2], b"\x21")]))
    whole("empty_tensor.safetensors", safetensors_file([("e", "F32", [0, 4], b"")], pad=False))
    whole("no_tensors.safetensors", safetensors_file([]))
    whole("header_too_long.safetensors", struct.pack("<Q", 2 ** 63) + b"{}")
    whole("short.safetensors", b"\x02\x00")
    good = safetensors_file([("a", "F32", [1], b"\x00\x00\x80\x3f"), ("b", "F32", [1], b"\x00\x00\x00\x40")])
    whole("overlap.safetensors", good.replace(b'"data_offsets":[4,8]', b'"data_offsets":[0,4]'))
    whole("duplicate.safetensors", safetensors_file([("a", "F32", [1], b"\0" * 4)]).replace(
        b'{"a"', b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a"'))
    built = lambda name, header, data=b"": write(t, name, b"\x00" + header.encode() + data)
    built("built_f32.header", '{"x":{"dtype":"F32","shape":[1,1],"data_offsets":[0,4]}}', b"\x00\x00\x80\x3f")
    built("built_shape_overflow.header",
          '{"x":{"dtype":"F64","shape":[4294967296,4294967296,4],"data_offsets":[0,8]}}', b"\0" * 8)
    built("built_unknown_dtype.header", '{"x":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}}', b"\0")
    built("built_deep.header", '{"__metadata__":' + nested(3000) + "}")
    write(t, "built_invalid_utf8.header", b'\x00{"\xff\xfe":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}\x00')
    built("built_long_name.header", '{"' + "n" * 2000 + '":{"dtype":"U8","shape":[2],"data_offsets":[0,1]}}', b"\0")


def png_chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png(width, height, depth, colour, rows, extra=b"", interlace=0, idat=None):
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, interlace)
    data = zlib.compress(b"".join(b"\x00" + r for r in rows)) if idat is None else idat
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra + png_chunk(b"IDAT", data) +
            png_chunk(b"IEND", b""))


def images(t):
    for name in ("alpha.png", "grey16.png", "quadrants.jpg", "grey.jpg", "cmyk.jpg"):
        copy(t, name, os.path.join("tests", "data", "images", name))
    palette = png_chunk(b"PLTE", b"\xff\x00\x00\x00\x00\xff") + png_chunk(b"tRNS", b"\xff\x80")
    write(t, "palette_1bit.png", png(4, 2, 1, 3, [b"\x50", b"\xa0"], extra=palette))
    write(t, "interlaced_grey.png", png(3, 3, 8, 0, [b"\x00\x80\xff"] * 3, interlace=1))
    write(t, "text_chunks.png", png(1, 1, 8, 2, [b"\x10\x20\x30"], extra=(
        png_chunk(b"tEXt", b"parameters\x00Steps: 1") +
        png_chunk(b"zTXt", b"comment\x00\x00" + zlib.compress(b"zipped")) +
        png_chunk(b"iTXt", b"tessera-manifest\x00\x00\x00\x00\x00" + '{"schema_version": 1, "label": "\u00e9"}'.encode()))))
    # Hostile: a header claiming a huge image over a few bytes of data; a file cut short.
    write(t, "huge_header.png", png(100000, 100000, 8, 2, [b"\x00\x00\x00"]))
    write(t, "bad_crc.png", png(1, 1, 8, 0, [b"\x00"])[:-5] + b"\x00\x00\x00\x00\x00")
    with open(os.path.join(root, "tests", "data", "images", "quadrants.jpg"), "rb") as f:
        jpeg = f.read()
    write(t, "truncated.jpg", jpeg[: len(jpeg) // 2])
    # SOF0 of quadrants.jpg patched to 10000 x 10000 (the data then runs out at once).
    sof = jpeg.index(b"\xff\xc0")
    write(t, "huge_header.jpg", jpeg[: sof + 5] + struct.pack(">HH", 10000, 10000) + jpeg[sof + 9:])


def bounded_input():
    t = "fuzz_bounded_input"
    write(t, "utf8_mixed.txt", "caf\u00e9 \u20ac \U0001F600 ".encode() + b"\xed\xa0\x80 \xc0\xaf \xf4\x90\x80\x80 \xe2\x82")
    write(t, "controls.txt", "a\tb\nc\rd\x1b[31m\x7f\"quoted\" back\\slash")
    write(t, "json_strings.json", r'{"a": "[[[{{\"", "b": ["\\", "]"], "c": {"d": []}}')
    write(t, "json_deep_valid.json", nested(9))
    write(t, "json_deep.json", nested(1000))
    write(t, "json_unbalanced.json", "]]]}}}[[{")


def prompt():
    t = "fuzz_prompt"
    cases = json.load(open(os.path.join(root, "tests/data/tokenizer/clip_ids.json"), encoding="utf-8"))["cases"]
    for i, case in enumerate(cases[::24]):  # every 24th of the fixture's prompts: ~30 seeds
        write(t, "fixture_%03d.txt" % i, case["text"])
    write(t, "emphasis.txt", "a (cat:1.2) on [a] ((mat)), (dog:-0.5) \\(literal\\) [unbalanced (")
    write(t, "break.txt", "first part BREAK second part BREAK BREAK (BREAK:1.1) BREAK")
    write(t, "long.txt", ", ".join(["masterpiece", "best quality", "ultra detailed"] * 40))
    write(t, "specials.txt", "<|startoftext|> a <|endoftext|> b <|ENDOFTEXT|> !! !")
    write(t, "unicode.txt", "caf\u00e9 \u732b\u306e\u5199\u771f \U0001F600 \u03a3\u03a3 \u00df ".encode() + b"\xff\xfe\x00 tail")
    write(t, "nested.txt", "(" * 200 + "deep" + ")" * 200 + "[" * 200 + "x")


COMFY_DEFAULT = {
    "3": {"class_type": "KSampler", "inputs": {
        "seed": 156680208700286, "steps": 20, "cfg": 8, "sampler_name": "euler", "scheduler": "normal", "denoise": 1,
        "model": ["4", 0], "positive": ["6", 0], "negative": ["7", 0], "latent_image": ["5", 0]}},
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "v1-5-pruned-emaonly.safetensors"}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512, "batch_size": 1}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "beautiful scenery, purple galaxy bottle", "clip": ["4", 1]}},
    "7": {"class_type": "CLIPTextEncode", "inputs": {"text": "text, watermark", "clip": ["4", 1]}},
    "8": {"class_type": "VAEDecode", "inputs": {"samples": ["3", 0], "vae": ["4", 2]}},
    "9": {"class_type": "SaveImage", "inputs": {"filename_prefix": "ComfyUI", "images": ["8", 0]}},
}


def infotext():
    t = "fuzz_infotext"
    write(t, "a1111_docstring.txt",
          "girl with an artist's beret, determined, blue eyes, ((eyeshadow)), (coquettish), detailed, intricate\n"
          "Negative prompt: ugly, (((deformed))), [blurry], bad anatomy, (extra_limb), messy drawing\n"
          "Steps: 20, Sampler: Euler a, CFG scale: 7, Seed: 965400086, Size: 512x512, Model hash: 45dee52b")
    write(t, "a1111_modern.txt",
          "a cat\nSteps: 20, Sampler: DPM++ 2M, Schedule type: Karras, CFG scale: 7, Seed: 1234, Size: 512x768, "
          "Model hash: 6ce0161689, Model: v1-5-pruned-emaonly, Clip skip: 2, Version: v1.10.1")
    write(t, "a1111_hires.txt",
          "castle\nSteps: 30, Sampler: DPM++ 2M Karras, CFG scale: 6.5, Seed: 7, Size: 512x512, Denoising strength: 0.7, "
          "Hires upscale: 2, Hires upscaler: Latent, Hires resize: 1024x1024, Lora hashes: \"add_detail: 7c6bad76eb54, "
          "more: 3b8aa1d351ef\", Emphasis: No norm, Version: v1.6.0")
    write(t, "tessera.txt",
          "a (house:1.3)\nNegative prompt: fog\nSteps: 25, Sampler: DDIM, CFG scale: 7.5, Seed: 18446744073709551615, "
          "Size: 768x512, Model hash: 0123456789, Model: \"my, model: v2\", Denoising strength: 0.5, Clip skip: 2, "
          "Tile: 512, Overlap: 64, Window: hann, Fusion: noise, Batch: 2, Graphs: step, Precision: bf16, Backend: cuda, "
          "Upscale: 1.5, Preserve color: True, Eta DDIM: 0.25, Version: tessera-0.1.0")
    write(t, "unicode.txt",
          "\u732b\u306e\u5199\u771f \U0001F600\n  line two  \n\nNegative prompt:   caf\u00e9\nsecond\n"
          "Steps: 5, Sampler: Euler, Schedule type: Uniform, Seed: 1, Size: \uff15\uff11\uff12x64, K\u00e9y: \"\\u00e9\"")
    write(t, "unbalanced.txt", 'Steps: "20, Sampler: "Euler a, Seed: 1", CFG scale: "7\\", Size: 64x64", Tile: ""')
    write(t, "no_colon_line.txt", "prompt\n" + "word-run / more " * 256)
    write(t, "many_keys.txt", ", ".join("Key %d: %d" % (i, i) for i in range(500)))
    write(t, "invalid_utf8.txt", b"Steps: 1, Seed: 2, Te\xffrm: \x1b[31mred\x07, Size: 1x1\n\xc0\xaf")
    write(t, "comfy_default.json", json.dumps(COMFY_DEFAULT))
    advanced = dict(COMFY_DEFAULT)
    advanced["3"] = {"class_type": "KSamplerAdvanced", "inputs": {
        "add_noise": "enable", "noise_seed": 42, "steps": 30, "cfg": 6.5, "sampler_name": "dpmpp_2m",
        "scheduler": "karras", "start_at_step": 0, "end_at_step": 10000, "return_with_leftover_noise": "disable",
        "model": ["4", 0], "positive": ["10", 0], "negative": ["7", 0], "latent_image": ["5", 0]}}
    advanced["10"] = {"class_type": "ControlNetApply", "inputs": {"conditioning": ["6", 0], "strength": 1}}
    advanced["11"] = {"class_type": "CLIPSetLastLayer", "inputs": {"clip": ["4", 1], "stop_at_clip_layer": -2}}
    advanced["6"] = {"class_type": "CLIPTextEncode", "inputs": {"text": "a castle", "clip": ["11", 0]}}
    write(t, "comfy_advanced.json", json.dumps(advanced))
    write(t, "comfy_cycle.json", json.dumps({
        "1": {"class_type": "KSampler", "inputs": {"positive": ["2", 0], "model": ["1", 0], "seed": ["9", 0]}},
        "2": {"class_type": "ConditioningSetArea", "inputs": {"conditioning": ["2", 0]}}}))
    write(t, "comfy_deep.json", "{" + nested(200) + "}")


if __name__ == "__main__":
    run_settings()
    manifest()
    model_config()
    safetensors()
    images("fuzz_init_image")
    images("fuzz_png_read")
    bounded_input()
    prompt()
    infotext()
