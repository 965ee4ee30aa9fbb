// FLUX.1's text encoders from the single files users keep beside a BFL transformer file
// (stable-diffusion.cpp's docs/flux.md, ComfyUI's DualCLIPLoader): clip_l.safetensors (transformers'
// CLIPTextModel names, bare, under "text_model." or ComfyUI's "text_encoders.clip_l.transformer."),
// t5xxl_fp16.safetensors or an fp8 T5 (core/models/t5/T5Model.h loadSingleFile) with the T5 v1.1
// SentencePiece model beside it; and the whole model from a transformer file, a VAE file and those.
// Qt-free.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/LoadProgress.h"
#include "core/models/clip/ClipTextModel.h"
#include "core/models/flux/FluxFiles.h"
#include "core/models/flux/FluxModel.h"

namespace tessera {

enum class TextEncoderFileKind { ClipL, T5 };

// Which encoder `path` (a safetensors file) holds, from its header's names. Throws ModelError
// naming the file when it holds neither ("...: neither a CLIP-L nor a T5 encoder (no
// final_layer_norm.weight under text_model. or encoder.)").
TextEncoderFileKind textEncoderFileKind(const std::string& path);

// A CLIP text encoder file: its config from its shapes (hidden size, layers, MLP width, vocabulary
// and positions; heads of 64, QuickGELU and pooling at the largest id as CLIP-L), every tensor
// checked by ClipTextModel::fromTensors. Throws ModelError naming the file and the tensor.
std::shared_ptr<const ClipTextModel> loadClipTextFile(const std::string& path, LoadMeter* meter = nullptr);

// The SentencePiece model a T5 file is used with: spiece.model beside it, else
// <file name without extension>.spiece.model. Throws ModelError saying where it looked.
std::string t5TokenizerBeside(const std::string& t5File);

// A FLUX.1 model from a transformer file (BFL names, ComfyUI's all-in-one), a VAE file ("": the
// transformer file's own) and the text encoder files (CLIP-L and T5, either order; none: a run needs
// its encodings given). Throws ModelError naming what is missing or does not fit.
// `options` as loadFluxFiles's (the VAE's sizes, hashing, progress).
std::shared_ptr<const FluxModel> loadFluxFromFiles(const std::string& transformer, const std::string& vae,
                                                   const std::vector<std::string>& textEncoders,
                                                   const FluxFilesOptions& options = {});

}  // namespace tessera
