// The restricted PyTorch checkpoint reader (core/formats/TorchCheckpoint.h, core/formats/Pickle.h).
// Files torch.save wrote (tests/data/pickles/torch, tools/reference/make_torch_checkpoints.py) must
// read exactly: names, dtypes, shapes, strides, offsets and the SHA-256 of every tensor's values.
// The crafted corpus (tests/data/pickles/hostile, tools/reference/make_pickle_corpus.py) must be
// refused file by file with a message naming what was refused, each quickly and without any large
// allocation; its valid files must read exactly as written.
#include <QtTest/QtTest>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/Sha256.h"
#include "core/formats/Pickle.h"
#include "core/formats/Safetensors.h"
#include "core/formats/TorchCheckpoint.h"
#include "core/models/upscale/StateDict.h"

using namespace tessera;
namespace fs = std::filesystem;

// Every allocation through operator new, counted while a test measures one open.
namespace {
std::atomic<bool> gCounting{false};
std::atomic<std::size_t> gLargest{0};
std::atomic<std::size_t> gTotal{0};

void* allocate(std::size_t size) {
    if (gCounting.load(std::memory_order_relaxed)) {
        gTotal.fetch_add(size, std::memory_order_relaxed);
        std::size_t seen = gLargest.load(std::memory_order_relaxed);
        while (size > seen && !gLargest.compare_exchange_weak(seen, size, std::memory_order_relaxed)) {}
    }
    if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
    throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t size) { return allocate(size); }
void* operator new[](std::size_t size) { return allocate(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {

const fs::path kTorchFiles = fs::path(TESSERA_TEST_DATA) / "pickles" / "torch";
const fs::path kCorpus = fs::path(TESSERA_TEST_DATA) / "pickles" / "hostile";
const fs::path kUpscale = fs::path(TESSERA_TEST_DATA) / "upscale";

nlohmann::json readJson(const fs::path& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

std::string sha256Of(const std::vector<std::byte>& bytes) { return sha256Hex(bytes.data(), bytes.size()); }

// What opening `path` did: the error message ("" when it opened), the time it took, the largest
// single allocation and all bytes allocated.
struct OpenResult {
    std::string error;
    double seconds = 0;
    std::size_t largest = 0, total = 0;
};

OpenResult openMeasured(const fs::path& path) {
    OpenResult r;
    gLargest = 0;
    gTotal = 0;
    const auto start = std::chrono::steady_clock::now();
    gCounting = true;
    try {
        const TorchCheckpointFile file(path.string());
    } catch (const TorchCheckpointError& e) {
        gCounting = false;
        r.error = e.what();
    } catch (const std::exception& e) {
        gCounting = false;
        r.error = std::string("<wrong exception type> ") + e.what();
    }
    gCounting = false;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.largest = gLargest;
    r.total = gTotal;
    return r;
}

// The message of the PickleError that parsing `bytes` throws, or a marker that fails every check.
std::string pickleError(const std::string& bytes, PicklePersistentIds ids = PicklePersistentIds::Zip) {
    try {
        (void)parsePickle(bytes, ids);
    } catch (const PickleError& e) {
        return e.what();
    }
    return "<no error>";
}

std::string binunicode(const std::string& text) {
    std::string out = "X";
    const auto n = static_cast<std::uint32_t>(text.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
    return out + text;
}

#define EXPECT_CONTAINS(text, part)                             \
    QVERIFY2(std::string(text).find(part) != std::string::npos, \
             (std::string(text) + "  [expected: " + (part) + "]").c_str())

}  // namespace

class TestTorchCheckpoint : public QObject {
    Q_OBJECT

private slots:
    // Every tensor of every torch.save file, compared with what torch itself reported.
    void torchSavedFilesReadExactly() {
        const nlohmann::json expected = readJson(kTorchFiles / "expected.json");
        int files = 0, tensors = 0;
        for (const auto& [fileName, entry] : expected.items()) {
            if (fileName.front() == '_') continue;
            ++files;
            const TorchCheckpointFile file((kTorchFiles / fileName).string());
            QCOMPARE(file.format() == TorchCheckpointFormat::Zip, entry["zip"].get<bool>());
            EXPECT_CONTAINS(file.description(), "nothing executed");
            const nlohmann::json& want = entry["tensors"];
            QCOMPARE(file.tensors().size(), want.size());
            for (const auto& [name, t] : want.items()) {
                const TorchTensorInfo* info = file.find(name);
                QVERIFY2(info != nullptr, (fileName + ": no tensor " + name).c_str());
                const std::string where = fileName + " " + name;
                QCOMPARE(std::string(toString(info->dtype)), t["dtype"].get<std::string>());
                QCOMPARE(info->shape, t["shape"].get<std::vector<std::int64_t>>());
                QCOMPARE(info->strides, t["stride"].get<std::vector<std::int64_t>>());
                QCOMPARE(info->storageOffset, t["storage_offset"].get<std::uint64_t>());
                const std::vector<std::byte> bytes = file.readBytes(*info);
                QCOMPARE(bytes.size(), info->byteSize());
                QVERIFY2(sha256Of(bytes) == t["sha256"].get<std::string>(), where.c_str());
                ++tensors;
            }
        }
        QCOMPARE(files, 8);
        QVERIFY(tensors >= 30);
    }

    // The float dtypes read as float32 agree with their raw bytes; the others are refused by name.
    void float32Conversion() {
        const TorchCheckpointFile file((kTorchFiles / "dtypes.pth").string());
        const std::vector<float> half = file.readFloat32("half");
        const std::vector<std::byte> raw = file.readBytes(*file.find("half"));
        QCOMPARE(half.size(), std::size_t{15});
        for (std::size_t i = 0; i < half.size(); ++i) {
            std::uint16_t bits = 0;
            std::memcpy(&bits, raw.data() + 2 * i, 2);
            QCOMPARE(half[i], halfToFloat(bits));
        }
        const std::vector<float> bf16 = file.readFloat32("bfloat16");
        const std::vector<std::byte> bfRaw = file.readBytes(*file.find("bfloat16"));
        for (std::size_t i = 0; i < bf16.size(); ++i) {
            std::uint16_t bits = 0;
            std::memcpy(&bits, bfRaw.data() + 2 * i, 2);
            QCOMPARE(bf16[i], bfloat16ToFloat(bits));
        }
        const std::vector<float> dbl = file.readFloat32("double");
        const std::vector<std::byte> dRaw = file.readBytes(*file.find("double"));
        for (std::size_t i = 0; i < dbl.size(); ++i) {
            double d = 0;
            std::memcpy(&d, dRaw.data() + 8 * i, 8);
            QCOMPARE(dbl[i], static_cast<float>(d));
        }
        QCOMPARE(file.readFloat32("scalar"), std::vector<float>{2.5f});
        QVERIFY(file.readFloat32("empty").empty());
        for (const char* name : {"long", "bool"}) {
            try {
                (void)file.readFloat32(name);
                QFAIL("an integer tensor was read as float32");
            } catch (const TorchCheckpointError& e) {
                EXPECT_CONTAINS(e.what(), std::string("'") + name + "'");
                EXPECT_CONTAINS(e.what(), name == std::string("long") ? "int64" : "bool");
            }
        }
        try {
            (void)file.readFloat32("missing");
            QFAIL("a missing tensor was read");
        } catch (const TorchCheckpointError& e) {
            EXPECT_CONTAINS(e.what(), "no tensor 'missing'");
        }
    }

    // Views over one storage: a row block of a non-contiguous view equals the same block of the
    // whole view; the storage is shared, not copied per name.
    void viewsAndRanges() {
        const TorchCheckpointFile file((kTorchFiles / "views.pth").string());
        const TorchTensorInfo& t = *file.find("transposed");
        QVERIFY(!t.contiguous());
        QCOMPARE(t.storageKey, file.find("base")->storageKey);
        const std::vector<float> whole = file.readFloat32(t);
        const std::vector<float> part = file.readFloat32(t, 5, 13);
        QCOMPARE(part, std::vector<float>(whole.begin() + 5, whole.begin() + 18));
        const std::vector<float> base = file.readFloat32("base");  // 6 x 8
        for (std::size_t r = 0; r < 8; ++r)
            for (std::size_t c = 0; c < 6; ++c) QCOMPARE(whole[r * 6 + c], base[c * 8 + r]);
        const std::vector<float> expanded = file.readFloat32("expanded");  // (3, 5), stride (0, 1)
        for (std::size_t i = 0; i < 15; ++i) QCOMPARE(expanded[i], expanded[i % 5]);
        try {
            (void)file.readFloat32(t, 40, 9);
            QFAIL("a range past the tensor was read");
        } catch (const TorchCheckpointError& e) {
            EXPECT_CONTAINS(e.what(), "outside its 48");
        }
    }

    // Nested wrappers stay visible; non-tensor leaves are listed.
    void nestedWrappers() {
        const TorchCheckpointFile file((kTorchFiles / "nested.pth").string());
        QVERIFY(file.has("params_ema.conv.weight"));
        QVERIFY(file.has("params.conv.weight"));
        std::set<std::string> skipped;
        for (const TorchSkippedEntry& e : file.skipped()) skipped.insert(e.name + ": " + e.what);
        QCOMPARE(file.skippedCount(), std::size_t{4});
        QVERIFY(skipped.count("iter: int 5") == 1);
        QVERIFY(skipped.count("note: str 'text'") == 1);
        QVERIFY(skipped.count("shape: tuple of 2") == 1);
        EXPECT_CONTAINS(file.description(), "4 other entries skipped");
    }

    // The upscale fixtures' .pth files hold exactly their .safetensors siblings, and the model
    // loader's StateDict takes the checkpoint reader as it takes safetensors.
    void upscaleModelsMatchSafetensors() {
        const std::vector<std::pair<std::string, std::string>> cases{
            {"compact_x4/model.pth", ""},
            {"compact_x4/model_legacy.pth", ""},
            {"esrgan_basicsr_x2_unshuffle/model.pth", "params_ema."},
        };
        for (const auto& [pth, prefix] : cases) {
            const TorchCheckpointFile checkpoint((kUpscale / pth).string());
            const SafetensorsFile reference((kUpscale / fs::path(pth).parent_path() / "model.safetensors").string());
            QCOMPARE(checkpoint.tensors().size(), reference.tensors().size());
            for (const SafetensorsTensorInfo& t : reference.tensors()) {
                const TorchTensorInfo* info = checkpoint.find(prefix + t.name);
                QVERIFY2(info != nullptr, (pth + ": no " + prefix + t.name).c_str());
                QCOMPARE(info->shape, t.shape);
                const std::vector<float> a = checkpoint.readFloat32(*info);
                const std::vector<float> b = reference.readFloat32(t);
                QVERIFY2(a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0,
                         (pth + " " + t.name).c_str());
            }
            const StateDict fromPth = StateDict::fromFile(checkpoint);
            const StateDict fromSafetensors = StateDict::fromFile(reference);
            QCOMPARE(fromPth.prefix(), prefix);
            QCOMPARE(fromPth.entries().size(), fromSafetensors.entries().size());
            for (const StateDict::Entry& e : fromSafetensors.entries())
                QCOMPARE(fromPth.read(e.name), fromSafetensors.read(e.name));
        }
    }

    // The crafted valid files: big-endian storages, protocol 4, aliased views, training wrappers,
    // legacy views, _rebuild_tensor_v3 over an untyped storage, memo indices 2^31 apart.
    void craftedFilesRead() {
        const nlohmann::json expected = readJson(kCorpus / "expected.json");
        int files = 0;
        for (const auto& [fileName, entry] : expected.items()) {
            if (!entry.contains("tensors")) continue;
            ++files;
            const TorchCheckpointFile file((kCorpus / fileName).string());
            QCOMPARE(file.tensors().size(), entry["tensors"].size());
            for (const auto& [name, t] : entry["tensors"].items()) {
                const TorchTensorInfo* info = file.find(name);
                QVERIFY2(info != nullptr, (fileName + ": no tensor " + name).c_str());
                QCOMPARE(std::string(toString(info->dtype)), t["dtype"].get<std::string>());
                QCOMPARE(info->shape, t["shape"].get<std::vector<std::int64_t>>());
                QVERIFY2(sha256Of(file.readBytes(*info)) == t["sha256"].get<std::string>(),
                         (fileName + " " + name).c_str());
            }
            std::set<std::string> skipped;
            for (const TorchSkippedEntry& e : file.skipped()) skipped.insert(e.name);
            for (const auto& name : entry["skipped"]) QVERIFY(skipped.count(name.get<std::string>()) == 1);
        }
        QCOMPARE(files, 7);
        const TorchCheckpointFile wrappers((kCorpus / "ok_training_wrappers.pth").string());
        QCOMPARE(wrappers.archiveName(), std::string("model"));
        std::set<std::string> leaves;
        for (const TorchSkippedEntry& e : wrappers.skipped()) leaves.insert(e.name + ": " + e.what);
        QVERIFY(leaves.count("best: float 31.250000") == 1);  // a numpy.float64 scalar
        QVERIFY(leaves.count("args: object argparse.Namespace") == 1);
        QVERIFY(TorchCheckpointFile((kCorpus / "ok_big_endian.pth").string()).bigEndian());
        QVERIFY(TorchCheckpointFile((kCorpus / "ok_legacy_views.pth").string()).format() ==
                TorchCheckpointFormat::Legacy);
    }

    // Every hostile file is refused with a message naming what was refused, in well under a second,
    // having allocated little: nothing a file declares is allocated before it is checked.
    void hostileFilesRefused() {
        const nlohmann::json expected = readJson(kCorpus / "expected.json");
        std::set<std::string> listed;
        int refused = 0;
        for (const auto& [fileName, entry] : expected.items()) {
            listed.insert(fileName);
            if (!entry.contains("refused")) continue;
            ++refused;
            const OpenResult r = openMeasured(kCorpus / fileName);
            const std::string where = fileName + ": " + r.error;
            QVERIFY2(!r.error.empty(), (fileName + " was accepted").c_str());
            QVERIFY2(r.error.find("<wrong exception type>") == std::string::npos, where.c_str());
            EXPECT_CONTAINS(r.error, entry["refused"].get<std::string>());
            EXPECT_CONTAINS(r.error, fileName);
            QVERIFY2(r.seconds < 0.25, (where + " took " + std::to_string(r.seconds) + " s").c_str());
            const std::size_t fileBytes = fs::file_size(kCorpus / fileName);
            QVERIFY2(r.largest <= (std::size_t{1} << 20) + fileBytes,
                     (where + ": an allocation of " + std::to_string(r.largest) + " bytes").c_str());
            QVERIFY2(r.total <= (std::size_t{16} << 20),
                     (where + ": " + std::to_string(r.total) + " bytes allocated in all").c_str());
        }
        QVERIFY(refused >= 100);
        for (const auto& f : fs::directory_iterator(kCorpus)) {
            const std::string name = f.path().filename().string();
            QVERIFY2(name == "expected.json" || listed.count(name) == 1, (name + " has no expectation").c_str());
        }
    }

    // A storage that claims a terabyte (zip record and legacy count) is refused after reading the
    // directory and pickle only.
    void terabyteClaimsAllocateNothingLarge() {
        for (const char* name : {"lying_storage_1tb.pth", "lying_legacy_count.pth", "lying_legacy_numel.pth"}) {
            const OpenResult r = openMeasured(kCorpus / name);
            EXPECT_CONTAINS(r.error, "1099511627776");
            QVERIFY2(r.largest < (std::size_t{128} << 10),
                     (std::string(name) + ": " + std::to_string(r.largest)).c_str());
            QVERIFY2(r.total < (std::size_t{1} << 20), (std::string(name) + ": " + std::to_string(r.total)).c_str());
        }
    }

    // Opening never blocks on a FIFO and refuses anything but a regular file.
    void nonRegularFilesRefused() {
        const fs::path dir = fs::temp_directory_path() / ("tessera-torchckpt-" + std::to_string(::getpid()));
        fs::create_directories(dir);
        const fs::path fifo = dir / "model.pth";
        QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
        for (const fs::path& p : {fifo, dir}) {
            const OpenResult r = openMeasured(p);
            QVERIFY2(!r.error.empty() && r.error.find("<wrong exception type>") == std::string::npos, r.error.c_str());
            QVERIFY(r.seconds < 1.0);
        }
        fs::remove_all(dir);
    }

    // The pickle parser by itself: values, sharing, bounds that need more input than the corpus holds.
    void pickleParser() {
        // LONG1 is little-endian two's complement; BINGET shares the memoized list.
        const PickleDocument doc = parsePickle(std::string("\x80\x02(\x8a\x01\xff\x8a\x02\xff\x00]q\x00h\x00l.", 17),
                                               PicklePersistentIds::None);
        const PickleContainer& outer = doc.container(doc.root);
        QCOMPARE(outer.items.size(), std::size_t{4});
        QCOMPARE(outer.items[0].integer, std::int64_t{-1});
        QCOMPARE(outer.items[1].integer, std::int64_t{255});
        QCOMPARE(outer.items[2].slot, outer.items[3].slot);
        QCOMPARE(doc.containers.size(), std::size_t{2});
        // Bounds the committed corpus leaves out for size.
        EXPECT_CONTAINS(pickleError("\x80\x02" + binunicode(std::string((1u << 20) + 1, 'a')) + "."),
                        "strings are limited to 1048576 bytes");
        EXPECT_CONTAINS(pickleError("\x80\x02(" + std::string(300000, 'N') + "t."), "values on the pickle stack");
        // Offsets name the opcode.
        EXPECT_CONTAINS(pickleError(std::string("\x80\x02}(cos\nsystem\n")),
                        "'os.system', which a state dict does not need");
        EXPECT_CONTAINS(pickleError(std::string("\x80\x02}(cos\nsystem\n")), "at byte 4 of the pickle");
        try {
            (void)parsePickle("\x80\x02}", PicklePersistentIds::None);
            QFAIL("a pickle without STOP was read");
        } catch (const PickleError& e) {
            QVERIFY(e.truncated());
        }
        // Persistent ids only where storages belong.
        EXPECT_CONTAINS(pickleError("\x80\x02)Q.", PicklePersistentIds::None), "holds no storages");
    }
};

QTEST_GUILESS_MAIN(TestTorchCheckpoint)
#include "tst_torchcheckpoint.moc"
