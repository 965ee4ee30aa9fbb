// `tessera-cli info PATH` for Stable Diffusion models: a diffusers pipeline folder or a single-file
// checkpoint (core/models/sd/SingleFileCheckpoint.h). Family, parameters per model, stored precision,
// prediction type, A1111's model hash and the tensors the models leave unused. A checkpoint is
// described from its header (no tensor data is read, only hashed); a folder is loaded.
#pragma once

#include <ostream>
#include <string>

namespace tessera {

// Prints the description to `out`. Throws ModelError (invalid input) for a file or folder that
// cannot be read as such a model, naming the file and the tensor.
void printSdModelInfo(const std::string& path, const std::string& executableDir, std::ostream& out);

}  // namespace tessera
