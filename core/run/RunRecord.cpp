#include "core/run/RunRecord.h"

#include <algorithm>
#include <array>
#include <utility>

#include "core/base/FormatNumber.h"

namespace tessera {

namespace {

// One table, read both ways, so the names cannot drift apart.
constexpr std::array<std::pair<RunStatus, std::string_view>, 3> kStatusNames{
    {{RunStatus::Finished, "finished"}, {RunStatus::Cancelled, "cancelled"}, {RunStatus::Failed, "failed"}}};

}  // namespace

std::string_view toString(RunStatus status) {
    for (const auto& [s, name] : kStatusNames)
        if (s == status) return name;
    return "unknown";
}

std::optional<RunStatus> parseRunStatus(std::string_view text) {
    for (const auto& [s, name] : kStatusNames)
        if (name == text) return s;
    return std::nullopt;
}

namespace {

std::string wholeMs(double ms) { return std::to_string(static_cast<long long>(ms)) + " ms"; }

std::string tilesText(int n) { return std::to_string(n) + (n == 1 ? " tile" : " tiles"); }

}  // namespace

std::string describe(const TextEncodeRecord& text) {
    const std::uint64_t rows = text.rowsRun + text.rowsRemembered;
    return wholeMs(text.ms) + ", " + std::to_string(text.rowsRun) + " of " + std::to_string(rows) +
           " encoder rows run" + (text.rowsRemembered ? " (the rest remembered or repeated)" : "");
}

std::string describe(const VaeTilingRecord& t) {
    std::string text = std::to_string(t.cols) + "x" + std::to_string(t.rows) + " tiles of " + std::to_string(t.tile) +
                       " latent px + " + std::to_string(t.halo) + " halo (" + std::to_string(t.evaluatedW) + "x" +
                       std::to_string(t.evaluatedH) + " px evaluated), " +
                       (t.wholeImageNorm ? "whole-image GroupNorm" : "per-tile GroupNorm") + ", " +
                       (t.wholeImageAttention ? "attention over the whole image" : "attention within each tile");
    if (t.halo < t.requiredHalo) text += ", halo below the exact " + std::to_string(t.requiredHalo);
    if (t.canvases != "host")
        return text + ", canvases on the " + t.canvases + " (peak " + formatBytes(t.devicePeakBytes) + ")";
    return text + ", host peak " + formatBytes(t.hostPeakBytes);
}

std::string describeVaePass(const VaePassRecord& pass) {
    return (pass.tiled ? "tiled " + describe(pass.tiling) : std::string("untiled")) + " (" + pass.reason + ")";
}

std::string describeVaeDecode(const VaePassRecord& decode) {
    return "vae decode: " + std::to_string(decode.width) + "x" + std::to_string(decode.height) + " " +
           describeVaePass(decode) + ", " + wholeMs(decode.ms);
}

std::string describeVaeEncode(const VaePassRecord& encode) {
    return "vae encode: " + describeVaePass(encode) + ", " + wholeMs(encode.ms);
}

std::string describe(const TileBatchLowering& lowering) {
    return "batch: " + std::to_string(lowering.from) + " tiles per call do not fit (" + lowering.reason + "); trying " +
           std::to_string(lowering.to);
}

std::string describeAutoTileBatch(const TileBatchRecord& batch) {
    const int size = std::max(batch.ran, 1);
    const int calls = (batch.tiles + size - 1) / size;
    std::string note = "batch: auto, " + tilesText(batch.ran) + " per UNet call (" + tilesText(batch.tiles);
    note += calls == 1 ? " in one call" : " in " + std::to_string(calls) + " calls";
    if (batch.loweredToFit())
        note += "; fewer than the " + std::to_string(batch.autoBatch) + " asked for, to fit the device";
    return note + ")";
}

std::string describe(const UpscaleModelRecord& u) {
    const auto size = [](int w, int h) { return std::to_string(w) + "x" + std::to_string(h); };
    std::string text = "upscale model: " + u.name + " (" + u.architecture + ", " +
                       (u.pickle ? "a PyTorch checkpoint read without executing it" : std::string("safetensors")) +
                       ") on " + u.backend + " in " + u.precision + ": " + size(u.inputW, u.inputH) + " -> " +
                       size(u.outputW, u.outputH) + " in " + tilesText(u.tiles);
    if (u.tiles > 1) text += " of " + std::to_string(u.tile) + " px, overlap " + std::to_string(u.overlap);
    if (!u.tileNote.empty()) text += " (" + u.tileNote + ")";
    text += ", " + wholeMs(u.ms);
    if (u.resized()) text += "; resized to " + size(u.resizedW, u.resizedH) + " (" + u.resizeFilter + ")";
    return text;
}

std::string describe(const VaeFileRecord& vae) {
    return "vae: " + vae.name + " (" + vae.layout + " names, " +
           (vae.pickle ? "a PyTorch checkpoint read without executing it" : std::string("safetensors")) +
           ", VAE hash " + vae.sha256.substr(0, 10) + ") in place of the model's own";
}

std::string describe(const LoraRecord& lora) {
    std::string text = "lora: " + lora.name + " (" + lora.file + ", hash " + lora.shortHash + "), te " +
                       formatNumber(lora.teMultiplier) + ", unet " + formatNumber(lora.unetMultiplier) + ": " +
                       std::to_string(lora.modulesMerged) + " modules merged";
    if (lora.modulesSkipped > 0) text += ", " + std::to_string(lora.modulesSkipped) + " left out at multiplier 0";
    if (lora.modulesNotMerged > 0) text += "; " + std::to_string(lora.modulesNotMerged) + " modules not merged";
    if (lora.keysUnmatched > 0) text += "; " + std::to_string(lora.keysUnmatched) + " keys name nothing in the model";
    return text;
}

std::optional<GraphMode> effectiveGraphMode(const GraphStats& stats) {
    for (const GraphMode mode : {GraphMode::Off, GraphMode::Tile, GraphMode::Step})
        if (toString(mode) == stats.mode) return mode;
    return std::nullopt;
}

}  // namespace tessera
