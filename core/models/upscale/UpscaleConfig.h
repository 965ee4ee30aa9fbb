// UpscaleConfig: the architecture and hyperparameters of a super-resolution ("upscale") model as
// its file's keys and shapes give them (spandrel architectures/<family>/__init__.py load()), and
// the input sizes the model accepts (spandrel __helpers/size_req.py SizeRequirements). The three
// families Tessera runs:
//   ESRGAN / RRDBNet (spandrel architectures/ESRGAN, BasicSR basicsr/archs/rrdbnet_arch.py), in the
//     original layout ("model.0", "model.1.sub.N.RDBk.convj.0"), BasicSR / Real-ESRGAN's
//     ("conv_first", "body.N.rdbk.convj", "conv_body", "conv_upU", "conv_hr", "conv_last") and
//     BSRGAN / RealSR's ("RRDB_trunk", "trunk_conv", "upconvU", "HRconv"); ESRGAN+ (conv1x1); a
//     pixel-unshuffled input (Real-ESRGAN x2plus / x1);
//   Real-ESRGAN Compact (SRVGGNetCompact: realesrgan/archs/srvgg_arch.py);
//   SPAN (spandrel architectures/SPAN/__arch/span.py).
// Qt-free.
#pragma once

#include <string>

namespace tessera {

enum class UpscaleArchitecture { Esrgan, Compact, Span };
const char* toString(UpscaleArchitecture);  // "ESRGAN", "Compact", "SPAN"

// How an ESRGAN file names its modules.
enum class EsrganLayout {
    Original,  // ESRGAN's own: model.0, model.1.sub.N.RDBk.convj.0, model.1.sub.NB, model.3, ...
    BasicSr,   // BasicSR / Real-ESRGAN: conv_first, body.N.rdbk.convj, conv_body, conv_upU, conv_hr, conv_last
    Kair,      // BSRGAN / RealSR (KAIR): conv_first, RRDB_trunk.N.RDBk.convj, trunk_conv, upconvU, HRconv, conv_last
};
const char* toString(EsrganLayout);

// spandrel's SizeRequirements: an input is padded at the bottom/right to at least `minimum` and to
// a multiple of `multipleOf` (reflect, then replicate beyond what reflection reaches:
// __helpers/size_req.py pad_tensor), and the output cropped back.
struct SizeRequirements {
    int minimum = 0, multipleOf = 1;
    // The padded length of an axis of `length` pixels.
    int padded(int length) const;
    bool none() const { return minimum <= 1 && multipleOf == 1; }
};

struct UpscaleConfig {
    UpscaleArchitecture architecture = UpscaleArchitecture::Esrgan;
    EsrganLayout layout = EsrganLayout::Original;  // ESRGAN only
    int inChannels = 3;                            // of the image (before any pixel unshuffle)
    int outChannels = 3;                           // of the upscaled image
    int features = 64;                             // nf (ESRGAN), num_feat (Compact), feature_channels (SPAN)
    int blocks = 23;                               // RRDB blocks (ESRGAN), num_conv (Compact), SPAB blocks (SPAN: 6)
    int growth = 32;                               // ESRGAN: the dense blocks' growth channels (gc)
    int scale = 4;                                 // output size / input size
    int unshuffle = 1;  // ESRGAN: pixel_unshuffle factor of the input (Real-ESRGAN x2plus: 2, x1: 4)
    bool plus = false;  // ESRGAN+: the conv1x1 residual paths
    bool norm = true;   // SPAN: (x - rgb_mean) * 255 on the input (absent "no_norm" buffer)

    // The network's own factor: upsamples of the features (ESRGAN: scale * unshuffle).
    int networkScale() const { return scale * unshuffle; }
    // "ESRGAN 4x, 64 features, 23 blocks", "Real-ESRGAN Compact 4x, 64 features, 32 convolutions",
    // "SPAN 4x, 48 features", with the unshuffle, ESRGAN+ and channel counts where they apply.
    std::string describe() const;
    // ESRGAN: minimum 2, and a multiple of 4 with an unshuffled input (spandrel ESRGANArch.load);
    // Compact and SPAN: none.
    SizeRequirements sizeRequirements() const;
};

}  // namespace tessera
