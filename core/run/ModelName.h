// What a RunConfig's model names, told from the name alone (nothing is read). Qt-free.
#pragma once

#include <initializer_list>
#include <string>

namespace tessera {

// "random:sd15", "random:sdxl", ...: a model of random weights at a real family's shapes.
inline constexpr const char* kRandomModelPrefix = "random:";

// True when `path` names something loadSdModel reads: a folder with model_index.json or a
// .safetensors file (a .ckpt / .pt / .pth / .bin is "something" too: loadSdModel refuses it with
// the reason). An unconditional UNet2DModel folder is not.
bool isSdModelPath(const std::string& path);

// True when `path`'s extension is one of `extensions` ("." included, lower case), ignoring case.
bool hasFileExtension(const std::string& path, std::initializer_list<const char*> extensions);

}  // namespace tessera
