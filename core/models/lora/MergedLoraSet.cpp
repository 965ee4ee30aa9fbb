// MergedLoraSet: modules matched to the model, originals kept, deltas added on a few threads, and
// everything put back when a read fails (A1111 extensions-builtin/Lora/networks.py
// network_apply_weights / network_restore_weights_from_backup).
#include "core/models/lora/MergedLoraSet.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <cblas.h>

#include "core/base/Sha256.h"
#include "core/formats/Safetensors.h"
#include "core/models/lora/LoraNetwork.h"

namespace tessera {

namespace {

// More threads than this gain nothing on the memory-bound adds and small products of a LoRA.
constexpr unsigned kMaxThreads = 16;

// Threads for the modules when the caller leaves it open: one per hardware thread while OpenBLAS runs
// each GEMM on one thread (the CPU backend sets it so), else one, the GEMMs then being OpenBLAS's
// to spread: two layers of threads would oversubscribe every core (about 3.5x slower, measured).
unsigned defaultThreads() {
    if (openblas_get_num_threads() > 1) return 1;
    return std::max(1u, std::thread::hardware_concurrency());
}

// work(i) for i in [0, count) on up to `threads` threads; the first exception is rethrown after all
// threads stop (the rest of the work is abandoned).
void runParallel(std::size_t count, int threads, const std::function<void(std::size_t)>& work) {
    unsigned n = threads > 0 ? static_cast<unsigned>(threads) : defaultThreads();
    n = std::min<unsigned>({n, kMaxThreads, static_cast<unsigned>(std::max<std::size_t>(count, 1))});
    std::atomic<std::size_t> next{0};
    std::atomic<bool> failed{false};
    std::exception_ptr error;
    std::mutex errorMutex;
    const auto body = [&] {
        while (!failed.load()) {
            const std::size_t i = next.fetch_add(1);
            if (i >= count) return;
            try {
                work(i);
            } catch (...) {
                const std::lock_guard<std::mutex> lock(errorMutex);
                if (!error) error = std::current_exception();
                failed = true;
            }
        }
    };
    std::vector<std::thread> pool;
    pool.reserve(n - 1);
    for (unsigned t = 1; t < n; ++t) pool.emplace_back(body);
    body();
    for (std::thread& t : pool) t.join();
    if (error) std::rethrow_exception(error);
}

std::int64_t numelOf(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (const std::int64_t d : shape) n *= d;
    return n;
}

std::string exact(double v) {
    char buffer[64];
    const auto result = std::to_chars(buffer, buffer + sizeof buffer, v, std::chars_format::hex);
    return std::string(buffer, result.ptr);
}

// The modules of one LoRA that write one tensor, in file order.
struct TargetWork {
    const LoraTarget* target = nullptr;
    HostTensor* weight = nullptr;
    HostTensor* bias = nullptr;
    double multiplier = 1.0;
    std::vector<const LoraModule*> modules;
};

}  // namespace

std::map<std::string, HostTensor>* LoraWeights::component(LoraComponent c) const {
    switch (c) {
        case LoraComponent::UNet:
            return unet;
        case LoraComponent::TextEncoder:
            return textEncoder;
        case LoraComponent::TextEncoder2:
            return textEncoder2;
    }
    return nullptr;
}

MergedLoraSet MergedLoraSet::merge(const LoraWeights& target, const LoraKeyMap& keys,
                                   const std::vector<LoraApplication>& loras, const LoraMergeOptions& options) {
    MergedLoraSet set;
    try {
        for (const LoraApplication& lora : loras) set.mergeOne(target, keys, lora, options);
    } catch (...) {
        set.restore(target);
        throw;
    }
    set.digest_ = loraSetDigest(loras, options);
    return set;
}

void MergedLoraSet::mergeOne(const LoraWeights& target, const LoraKeyMap& keys, const LoraApplication& lora,
                             const LoraMergeOptions& options) {
    if (lora.file == nullptr) throw std::invalid_argument("MergedLoraSet::merge: a LoRA without its file");
    const LoraFile& file = *lora.file;
    LoraMergeReport report;
    report.name = lora.name;
    report.path = file.path();
    report.skippedEntries = file.skipped();
    const LoraNetwork network = buildLoraNetwork(file);
    report.unmatchedKeys = network.unknownKeys;

    std::vector<TargetWork> work;
    std::map<const LoraTarget*, std::size_t> workOf;
    for (const LoraModule& m : network.modules) {
        if (!isMergeable(m.algorithm)) {
            report.notMerged.push_back(m.stem + " (" + std::string(toString(m.algorithm)) + ")");
            continue;
        }
        const LoraTarget* t = keys.find(m.stem);
        std::map<std::string, HostTensor>* tensors = t != nullptr ? target.component(t->component) : nullptr;
        const auto weight =
            tensors != nullptr ? tensors->find(t->weight()) : std::map<std::string, HostTensor>::iterator{};
        if (tensors == nullptr || weight == tensors->end()) {
            report.unmatchedKeys.insert(report.unmatchedKeys.end(), m.keys.begin(), m.keys.end());
            continue;
        }
        std::string why;
        const std::optional<LoraDeltaShape> shape = loraDeltaShape(m, why);
        const bool biasDelta = m.part(LoraPart::DiffBias) != nullptr || m.part(LoraPart::NormBias) != nullptr;
        const auto bias = tensors->find(t->bias());
        if (!shape) {
            report.shapeMismatches.push_back(why);
            continue;
        }
        if (weight->second.shape.empty() || shape->rows != weight->second.shape[0] ||
            shape->numel != numelOf(weight->second.shape)) {
            report.shapeMismatches.push_back(m.stem + ": a delta of " + std::to_string(shape->rows) + " rows and " +
                                             std::to_string(shape->numel) + " elements for " + t->weight() + " " +
                                             shapeToString(weight->second.shape));
            continue;
        }
        if (biasDelta && (bias == tensors->end() || numelOf(bias->second.shape) != shape->rows)) {
            report.shapeMismatches.push_back(m.stem + ": a bias difference for " + t->module +
                                             ", which has no bias of " + std::to_string(shape->rows));
            continue;
        }
        const double multiplier = t->component == LoraComponent::UNet ? lora.unetMultiplier : lora.teMultiplier;
        if (multiplier == 0.0) {  // A1111 adds updown * 0: nothing changes
            ++report.modulesSkipped;
            continue;
        }
        const auto [it, added] = workOf.emplace(t, work.size());
        if (added) work.push_back(TargetWork{t, &weight->second, nullptr, multiplier, {}});
        TargetWork& w = work[it->second];
        if (biasDelta) w.bias = &bias->second;
        w.modules.push_back(&m);
    }

    // Originals first (a tensor an earlier LoRA of the set changed keeps its first original).
    for (const TargetWork& w : work) {
        originals_.try_emplace(TensorKey{w.target->component, w.target->weight()}, w.weight->data);
        if (w.bias != nullptr) originals_.try_emplace(TensorKey{w.target->component, w.target->bias()}, w.bias->data);
    }
    const LoraModuleMerge how{1.0, lora.dyn, options.dora};
    runParallel(work.size(), options.threads, [&](std::size_t i) {
        LoraModuleMerge each = how;
        each.multiplier = work[i].multiplier;
        for (const LoraModule* m : work[i].modules) mergeLoraModule(*m, file, each, *work[i].weight, work[i].bias);
    });
    for (const TargetWork& w : work) report.modulesMerged += w.modules.size();
    std::sort(report.unmatchedKeys.begin(), report.unmatchedKeys.end());
    reports_.push_back(std::move(report));
}

void MergedLoraSet::restore(const LoraWeights& target) {
    std::vector<std::string> lost;
    for (auto& [key, values] : originals_) {
        std::map<std::string, HostTensor>* tensors = target.component(key.first);
        const auto it = tensors != nullptr ? tensors->find(key.second) : std::map<std::string, HostTensor>::iterator{};
        if (tensors == nullptr || it == tensors->end() || it->second.data.size() != values.size()) {
            lost.push_back(std::string(toString(key.first)) + "/" + key.second);
            continue;
        }
        it->second.data = std::move(values);
    }
    originals_.clear();
    reports_.clear();
    digest_.clear();
    if (!lost.empty())
        throw std::invalid_argument("MergedLoraSet::restore: the weights no longer hold " + excerptList(lost));
}

std::uint64_t MergedLoraSet::backupBytes() const {
    std::uint64_t bytes = 0;
    for (const auto& [key, values] : originals_) bytes += values.size() * sizeof(float);
    return bytes;
}

std::string loraSetDigest(const std::vector<LoraApplication>& loras, const LoraMergeOptions& options) {
    if (loras.empty()) return {};
    std::string text = "tessera lora set 1\ndora " + std::string(toString(options.dora)) + "\n";
    for (const LoraApplication& l : loras) {
        text += (l.file != nullptr ? l.file->sha256() : std::string("-")) + " te " + exact(l.teMultiplier) + " unet " +
                exact(l.unetMultiplier) + " dyn " + (l.dyn ? std::to_string(*l.dyn) : std::string("-")) + "\n";
    }
    return sha256Hex(text.data(), text.size());
}

}  // namespace tessera
