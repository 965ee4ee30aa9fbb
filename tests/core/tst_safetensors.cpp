// Safetensors reader/writer (huggingface/safetensors README.md): round trips through the writer and
// hand-crafted damaged files. Every rejection must be a SafetensorsError whose message names
// the file and the offending tensor — never a crash, never a silent success.
#include <QtTest/QtTest>

#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/formats/Safetensors.h"

using namespace tessera;

namespace {

void writeBytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string readBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file from an explicit header text and data buffer; `length` overrides the header length.
void writeRaw(const std::string& path, const std::string& header, std::size_t dataBytes,
              std::optional<std::uint64_t> length = std::nullopt) {
    const std::uint64_t n = length.value_or(header.size());
    std::string bytes(8, '\0');
    std::memcpy(bytes.data(), &n, 8);
    bytes += header;
    bytes.append(dataBytes, '\x01');
    writeBytes(path, bytes);
}

// The message of the SafetensorsError `f` throws, or a marker that fails every check.
std::string errorOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const SafetensorsError& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("<wrong exception type> ") + e.what();
    }
    return "<no error>";
}

#define EXPECT_MESSAGE(message, part)                     \
    QVERIFY2((message).find(part) != std::string::npos,   \
             qPrintable(QStringLiteral("'%1' not in: %2") \
                            .arg(QString::fromStdString(std::string(part)), QString::fromStdString(message))))

SafetensorsTensorData floats(SafetensorsDtype dtype, std::vector<std::int64_t> shape, const std::vector<float>& v) {
    return {dtype, std::move(shape), encodeFloats(dtype, v)};
}

}  // namespace

static_assert(!std::is_copy_constructible_v<SafetensorsFile>);
static_assert(std::is_nothrow_move_constructible_v<SafetensorsFile>);

class TestSafetensors : public QObject {
    Q_OBJECT

private:
    QTemporaryDir tmp_;
    std::string path(const char* name) const { return tmp_.filePath(QString::fromUtf8(name)).toStdString(); }

private slots:
    void initTestCase() { QVERIFY(tmp_.isValid()); }

    void roundTripF32F16BF16() {
        // Values exactly representable in every dtype, so all three read back bit-exact.
        const std::vector<float> values{0.0f,  -0.0f, 1.0f,    -2.5f,  0.15625f, 256.0f,
                                        -3.0f, 0.5f,  1024.0f, -0.25f, 7.0f,     96.0f};
        const std::string file = path("roundtrip.safetensors");
        std::map<std::string, SafetensorsTensorData> tensors;
        tensors["a.weight"] = floats(SafetensorsDtype::F32, {3, 4}, values);
        tensors["b.half"] = floats(SafetensorsDtype::F16, {2, 2, 3}, values);
        tensors["c.brain"] = floats(SafetensorsDtype::BF16, {12}, values);
        tensors["d.scalar"] = floats(SafetensorsDtype::F32, {}, {42.0f});
        tensors["e.empty"] = floats(SafetensorsDtype::F16, {0, 5}, {});
        writeSafetensors(file, tensors, {{"format", "pt"}});

        // The header is padded to a multiple of 8, so the data buffer starts aligned.
        const std::string bytes = readBytes(file);
        std::uint64_t n = 0;
        std::memcpy(&n, bytes.data(), 8);
        QCOMPARE(n % 8, 0u);
        QCOMPARE(bytes.at(8 + n - 1) == ' ' || bytes.at(8 + n - 1) == '}', true);

        const SafetensorsFile st(file);
        QCOMPARE(st.path(), file);
        QCOMPARE(st.tensors().size(), std::size_t{5});
        QCOMPARE(st.metadata().at("format"), std::string("pt"));
        for (const char* name : {"a.weight", "b.half", "c.brain"}) {
            QVERIFY(st.has(name));
            QCOMPARE(st.readFloat32(name), values);
        }
        QVERIFY(st.find("a.weight")->dtype == SafetensorsDtype::F32);
        QCOMPARE(st.find("a.weight")->shape, (std::vector<std::int64_t>{3, 4}));
        QVERIFY(st.find("b.half")->dtype == SafetensorsDtype::F16);
        QCOMPARE(st.find("b.half")->byteSize(), std::uint64_t{24});
        QVERIFY(st.find("c.brain")->dtype == SafetensorsDtype::BF16);
        QCOMPARE(st.readFloat32("d.scalar"), std::vector<float>{42.0f});
        QCOMPARE(st.find("d.scalar")->numel(), std::int64_t{1});
        QCOMPARE(st.readFloat32("e.empty").size(), std::size_t{0});
        QVERIFY(st.find("nope") == nullptr);
        // The writer's layout: 4-byte dtypes before 2-byte ones.
        QVERIFY(st.find("a.weight")->begin < st.find("b.half")->begin);
        QCOMPARE(st.fileSize(), static_cast<std::uint64_t>(bytes.size()));
        QVERIFY(st.readBytes(*st.find("b.half")) == encodeFloats(SafetensorsDtype::F16, values));
        std::vector<std::byte> wrong(23);
        const std::string shortBuffer = errorOf([&] { st.readBytes(*st.find("b.half"), wrong); });
        EXPECT_MESSAGE(shortBuffer, "tensor 'b.half': 24 bytes cannot be read into 23");
        // The whole file in order, and a consumer that stops early.
        std::string whole;
        QVERIFY(st.readFileInChunks([&](std::span<const std::byte> chunk) {
            whole.append(reinterpret_cast<const char*>(chunk.data()), chunk.size());
            return true;
        }));
        QCOMPARE(whole, bytes);
        QVERIFY(!st.readFileInChunks([](std::span<const std::byte>) { return false; }));

        const std::string missing = errorOf([&] { (void)st.readFloat32("nope"); });
        EXPECT_MESSAGE(missing, file);
        EXPECT_MESSAGE(missing, "'nope'");
    }

    void halfAndBfloatConversions() {
        QCOMPARE(floatToHalf(1.0f), std::uint16_t{0x3c00});
        QCOMPARE(floatToHalf(-2.0f), std::uint16_t{0xc000});
        QCOMPARE(floatToHalf(65504.0f), std::uint16_t{0x7bff});
        QCOMPARE(floatToHalf(65520.0f), std::uint16_t{0x7c00});             // rounds to +Inf
        QCOMPARE(floatToHalf(1.0f + 0x1p-11f), std::uint16_t{0x3c00});      // tie -> even
        QCOMPARE(floatToHalf(1.0f + 3 * 0x1p-11f), std::uint16_t{0x3c02});  // tie -> even (up)
        QCOMPARE(floatToHalf(0x1p-24f), std::uint16_t{0x0001});             // smallest subnormal
        QCOMPARE(floatToHalf(0x1p-26f), std::uint16_t{0x0000});             // below half of it
        QCOMPARE(floatToHalf(0x1p-14f), std::uint16_t{0x0400});             // smallest normal
        QCOMPARE(halfToFloat(0x0001), 0x1p-24f);
        QCOMPARE(halfToFloat(0x03ff), 1023.0f * 0x1p-24f);
        QCOMPARE(halfToFloat(0x7bff), 65504.0f);
        QVERIFY(std::isinf(halfToFloat(0xfc00)) && halfToFloat(0xfc00) < 0);
        QVERIFY(std::isnan(halfToFloat(floatToHalf(std::numeric_limits<float>::quiet_NaN()))));
        // Every half value survives half -> float -> half.
        for (std::uint32_t h = 0; h < 0x10000; ++h) {
            const auto bits = static_cast<std::uint16_t>(h);
            if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0) continue;  // NaN payloads
            QCOMPARE(floatToHalf(halfToFloat(bits)), bits);
        }
        QCOMPARE(floatToBfloat16(1.0f), std::uint16_t{0x3f80});
        QCOMPARE(bfloat16ToFloat(0x3f80), 1.0f);
        QCOMPARE(floatToBfloat16(std::bit_cast<float>(0x3f808000u)), std::uint16_t{0x3f80});  // tie -> even
        QCOMPARE(floatToBfloat16(std::bit_cast<float>(0x3f818000u)), std::uint16_t{0x3f82});
        QVERIFY(std::isnan(bfloat16ToFloat(floatToBfloat16(std::numeric_limits<float>::quiet_NaN()))));
        const std::string bad = errorOf([] { (void)encodeFloats(SafetensorsDtype::I32, std::vector<float>{1.0f}); });
        EXPECT_MESSAGE(bad, "I32");
    }

    void unpaddedHeaderAndAnyKeyOrderAccepted() {
        // Older writers did not pad; keys need not follow data order.
        const std::string file = path("unpadded.safetensors");
        writeRaw(
            file,
            R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
            8);
        const SafetensorsFile st(file);
        QCOMPARE(st.tensors().size(), std::size_t{2});
        QCOMPARE(st.tensors().front().name, std::string("a"));
        QVERIFY(st.metadata().empty());
    }

    void moveTransfersTheOpenFile() {
        const std::string file = path("move.safetensors");
        writeSafetensors(file, {{"x", floats(SafetensorsDtype::F32, {2}, {1.0f, 2.0f})}});
        SafetensorsFile a(file);
        SafetensorsFile b(std::move(a));
        QCOMPARE(b.readFloat32("x"), (std::vector<float>{1.0f, 2.0f}));
        SafetensorsFile c(file);
        c = std::move(b);
        QCOMPARE(c.readFloat32("x"), (std::vector<float>{1.0f, 2.0f}));
    }

    // A file truncated or extended by another process after it was opened: every read says so
    // (the file is never memory-mapped, so nothing can fault), whichever part of it is read.
    void fileChangedWhileReadIsAnError() {
        std::map<std::string, SafetensorsTensorData> tensors;
        const std::vector<float> values(4096, 0.5f);
        tensors["a.f32"] = floats(SafetensorsDtype::F32, {4096}, values);
        tensors["b.f16"] = floats(SafetensorsDtype::F16, {4096}, values);
        tensors["c.bf16"] = floats(SafetensorsDtype::BF16, {4096}, values);
        const std::string file = path("shrinks.safetensors");
        writeSafetensors(file, tensors);
        const auto size = static_cast<std::uint64_t>(readBytes(file).size());
        const SafetensorsFile st(file);
        const std::uint64_t cut = st.fileSize() - st.find("c.bf16")->byteSize() - 100;  // inside b.f16
        QCOMPARE(::truncate(file.c_str(), static_cast<off_t>(cut)), 0);

        const auto expectChanged = [&](const std::string& m, std::uint64_t now) {
            EXPECT_MESSAGE(m, file);
            EXPECT_MESSAGE(m, "changed while it was being read");
            EXPECT_MESSAGE(m, "it was " + std::to_string(size) + " bytes when opened and is " + std::to_string(now) +
                                  " bytes now");
            EXPECT_MESSAGE(m, "do not modify the file while Tessera loads it");
        };
        for (const char* name : {"a.f32", "b.f16", "c.bf16"}) {  // before, across and after the cut
            const std::string m = errorOf([&] { (void)st.readFloat32(name); });
            expectChanged(m, cut);
        }
        EXPECT_MESSAGE(errorOf([&] { (void)st.readFloat32(*st.find("c.bf16"), 10, 20); }), "(it shrank)");
        expectChanged(errorOf([&] { (void)st.readBytes(*st.find("b.f16")); }), cut);
        expectChanged(errorOf([&] { (void)st.readFileInChunks([](std::span<const std::byte>) { return true; }); }),
                      cut);

        // Grown: the size differs from the size at open.
        writeSafetensors(file, tensors);
        const SafetensorsFile grown(file);
        {
            std::ofstream out(file, std::ios::binary | std::ios::app);
            out << "appended";
        }
        expectChanged(errorOf([&] { (void)grown.readFloat32("a.f32"); }), size + 8);
    }

    void rejectsMissingAndTinyFiles() {
        const std::string none = path("does-not-exist.safetensors");
        const std::string m1 = errorOf([&] { SafetensorsFile f(none); });
        EXPECT_MESSAGE(m1, none);
        EXPECT_MESSAGE(m1, "cannot open");

        const std::string tiny = path("tiny.safetensors");
        writeBytes(tiny, std::string("\x05\x00\x00", 3));
        const std::string m2 = errorOf([&] { SafetensorsFile f(tiny); });
        EXPECT_MESSAGE(m2, tiny);
        EXPECT_MESSAGE(m2, "3 bytes");
    }

    void rejectsTruncatedFile() {
        const std::string file = path("truncated.safetensors");
        writeSafetensors(file, {{"layer.weight", floats(SafetensorsDtype::F32, {4, 4}, std::vector<float>(16, 1.0f))}});
        std::string bytes = readBytes(file);
        bytes.resize(bytes.size() - 10);
        writeBytes(file, bytes);
        const std::string m = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m, file);
        EXPECT_MESSAGE(m, "'layer.weight'");
        EXPECT_MESSAGE(m, "past the end of the data buffer");
    }

    void rejectsHeaderLengthPastTheEnd() {
        const std::string file = path("pastend.safetensors");
        writeRaw(file, "{}", 0, 1000);
        const std::string m = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m, file);
        EXPECT_MESSAGE(m, "header length 1000 runs past the end of the file (10 bytes");
    }

    void rejectsAbsurdHeaderLength() {
        const std::string file = path("absurd.safetensors");
        writeRaw(file, "{}", 0, std::uint64_t{1} << 40);
        const std::string m = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m, file);
        EXPECT_MESSAGE(m, "exceeds the limit of 100000000");
        writeRaw(file, "{}", 0, std::numeric_limits<std::uint64_t>::max());  // would wrap 8 + N
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(file); }), "exceeds the limit");
    }

    void rejectsBadHeaderJson() {
        const std::string file = path("json.safetensors");
        writeRaw(file, "{\"a\": ", 0);
        const std::string m1 = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m1, file);
        EXPECT_MESSAGE(m1, "not valid JSON");
        writeRaw(file, "[1, 2]  ", 0);
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(file); }), "not a JSON object");
        writeRaw(file, "{\"a\": \"\xff\xfe\"}", 0);  // invalid UTF-8
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(file); }), "not valid JSON");
        writeRaw(
            file,
            R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
            4);
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(file); }), "tensor 'w' appears twice");
        writeRaw(file, R"({"__metadata__":{"format":1}})", 0);
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(file); }), "__metadata__ value for 'format'");
    }

    void rejectsMalformedEntries() {
        const std::string file = path("entries.safetensors");
        struct Case {
            const char* header;
            std::size_t data;
            const char* expected;
        };
        const Case cases[] = {
            {R"({"t.w":{"dtype":"F32","shape":[1]}})", 4, "tensor 't.w': no \"data_offsets\""},
            {R"({"t.w":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}})", 4, "tensor 't.w': unknown dtype 'F12'"},
            {R"({"t.w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "tensor 't.w': shape [-1]"},
            {R"({"t.w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4, "tensor 't.w': shape [1.5]"},
            {R"({"t.w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4,
             "tensor 't.w': data_offsets [4, 0] end before begin"},
            {R"({"t.w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4, "tensor 't.w': data_offsets [0]"},
            {R"({"t.w":{"dtype":"F32","shape":[2147483647,2147483647,2147483647],"data_offsets":[0,4]}})", 4,
             "tensor 't.w': shape [2147483647, 2147483647, 2147483647] of dtype F32 has no valid byte size"},
            {R"({"t.w":{"dtype":"F32","shape":[0,2147483648],"data_offsets":[0,0]}})", 0,
             "tensor 't.w': shape [0,2147483648] has a dimension above 2147483647"},
            {R"({"t.w":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}})", 1, "tensor 't.w': shape [3] of dtype F4"},
            {R"({"t.w":7})", 0, "tensor 't.w': entry is not an object"},
        };
        for (const Case& c : cases) {
            writeRaw(file, c.header, c.data);
            const std::string m = errorOf([&] { SafetensorsFile f(file); });
            EXPECT_MESSAGE(m, file);
            EXPECT_MESSAGE(m, c.expected);
        }
    }

    void opensWithoutBlocking() {
        // A FIFO with no writer would block a plain open() forever; a link to /dev/zero would
        // map or read without end. Both are refused before a byte is read.
        const std::string fifo = path("fifo.safetensors");
        QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
        QElapsedTimer timer;
        timer.start();
        const std::string m1 = errorOf([&] { SafetensorsFile f(fifo); });
        QVERIFY(timer.elapsed() < 5000);
        EXPECT_MESSAGE(m1, fifo);
        EXPECT_MESSAGE(m1, "is not a regular file");
        const std::string zero = path("zero.safetensors");
        QVERIFY(QFile::link(QStringLiteral("/dev/zero"), QString::fromStdString(zero)));
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(zero); }), "is not a regular file");
        const std::string folder = path("folder.safetensors");
        QVERIFY(QDir().mkpath(QString::fromStdString(folder)));
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(folder); }), "is a folder");
        const std::string loop = path("loop.safetensors");
        QVERIFY(QFile::link(QString::fromStdString(loop), QString::fromStdString(loop)));
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(loop); }), "too many levels of symbolic links");
    }

    void rejectsDeepNestingWithoutEchoingIt() {
        // ~60,000 levels in a shape must neither overflow the stack nor be echoed in the message.
        const std::string file = path("deep.safetensors");
        const std::string deep = std::string(60000, '[') + std::string(60000, ']');
        writeRaw(file, R"({"t.w":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]}})", 4);
        const std::string m = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m, file);
        EXPECT_MESSAGE(m, "nested deeper than 3 levels");
        QVERIFY2(m.size() < 500, m.c_str());
        // Deep nesting in the metadata or at the top is refused the same way.
        writeRaw(file, R"({"__metadata__":{"a":)" + deep + "}}", 0);
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(file); }), "nested deeper than 3 levels");
    }

    void boundsTensorCountRankAndMetadata() {
        // At the tensor limit the file loads (in well under a second: the parse is linear;
        // it took minutes when it was quadratic); one more is refused.
        const auto manyTensors = [](std::size_t n) {
            std::string header = "{";
            for (std::size_t i = 0; i < n; ++i)
                header += (i ? ",\"t" : "\"t") + std::to_string(i) +
                          "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" + std::to_string(i) + "," +
                          std::to_string(i + 1) + "]}";
            return header + "}";
        };
        const std::string file = path("many.safetensors");
        writeRaw(file, manyTensors(SafetensorsFile::kMaxTensors), SafetensorsFile::kMaxTensors);
        QElapsedTimer timer;
        timer.start();
        {
            const SafetensorsFile st(file);
            QCOMPARE(st.tensors().size(), SafetensorsFile::kMaxTensors);
            QVERIFY(st.has("t99999"));
        }
        qInfo("%zu tensors parsed in %lld ms", SafetensorsFile::kMaxTensors, static_cast<long long>(timer.elapsed()));
        writeRaw(file, manyTensors(SafetensorsFile::kMaxTensors + 1), SafetensorsFile::kMaxTensors + 1);
        const std::string m1 = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m1, file);
        EXPECT_MESSAGE(m1, "more than 100000 tensors");

        writeRaw(file, R"({"t.w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4);
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(file); }),
                       "tensor 't.w': an array of more than 8 entries; shapes have at most 8 dimensions");
        writeRaw(file, R"({"t.w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4);
        QCOMPARE(SafetensorsFile(file).find("t.w")->shape.size(), std::size_t{8});

        std::string metadata = R"({"__metadata__":{)";
        for (std::size_t i = 0; i <= SafetensorsFile::kMaxMetadataEntries; ++i)
            metadata += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":\"v\"";
        writeRaw(file, metadata + "}}", 0);
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(file); }), "__metadata__ has more than 10000 entries");
        writeRaw(file, R"({"__metadata__":{},"__metadata__":{}})", 0);
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(file); }), "__metadata__ appears twice");
    }

    void messagesQuoteOnlyExcerpts() {
        // Names, values and broken tokens of any length are shown shortened and escaped.
        const std::string file = path("long.safetensors");
        const std::string longName(1 << 20, 'n');
        writeRaw(file, "{\"" + longName + "\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
        const std::string m1 = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m1, "unknown dtype 'F99'");
        EXPECT_MESSAGE(m1, "(1048576 bytes)");
        QVERIFY2(m1.size() < 500, m1.c_str());
        // (plain literals: moc misreads raw strings that end in a quote)
        writeRaw(file, "{\"t\":{\"dtype\":\"F32\",\"shape\":[\"" + longName + "\"],\"data_offsets\":[0,4]}}", 4);
        const std::string m2 = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m2, "has an entry that is not a non-negative integer");
        QVERIFY2(m2.size() < 500, m2.c_str());
        writeRaw(file, "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":\"" + longName + "\x01\"}}", 4);
        const std::string m3 = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m3, "not valid JSON at byte");
        QVERIFY2(m3.size() < 500, m3.c_str());
        writeRaw(file, "{\"a\xff\x01\": 1}", 0);
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(file); }), "\\xFF");
    }

    void rejectsOverlappingOffsets() {
        const std::string file = path("overlap.safetensors");
        writeRaw(
            file,
            R"({"first":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"second":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
            24);
        const std::string m = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m, file);
        EXPECT_MESSAGE(m, "tensor 'second' (bytes 8..24) overlaps tensor 'first' (bytes 0..16)");
        // Two tensors on exactly the same bytes are also overlapping.
        writeRaw(
            file,
            R"({"first":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"second":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
            16);
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(file); }), "overlaps tensor 'first'");
    }

    void rejectsGapsAndTrailingBytes() {
        const std::string file = path("gap.safetensors");
        writeRaw(
            file,
            R"({"first":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"second":{"dtype":"F32","shape":[4],"data_offsets":[20,36]}})",
            36);
        const std::string m1 = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m1, file);
        EXPECT_MESSAGE(m1, "bytes 16..20 of the data buffer before tensor 'second' belong to no tensor");
        writeRaw(file, R"({"first":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 20);
        EXPECT_MESSAGE(errorOf([&] { SafetensorsFile f(file); }),
                       "the data buffer has 20 bytes but the tensors cover 16");
    }

    void rejectsOffsetsOutsideTheBuffer() {
        const std::string file = path("outside.safetensors");
        writeRaw(file, R"({"conv.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
        const std::string m = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m, file);
        EXPECT_MESSAGE(m, "tensor 'conv.weight': data_offsets [0, 16] run past the end of the data buffer (8 bytes");
    }

    void rejectsSizeMismatchWithShape() {
        const std::string file = path("mismatch.safetensors");
        writeRaw(file, R"({"conv.bias":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})", 12);
        const std::string m = errorOf([&] { SafetensorsFile f(file); });
        EXPECT_MESSAGE(m, file);
        EXPECT_MESSAGE(m, "tensor 'conv.bias': data_offsets [0, 12] hold 12 bytes but shape [4] of F32 needs 16");
    }

    void nonFloatDtypesListedButNotReadAsFloat() {
        const std::string file = path("ints.safetensors");
        std::map<std::string, SafetensorsTensorData> tensors;
        tensors["step"] = {SafetensorsDtype::I64, {2}, std::vector<std::byte>(16)};
        tensors["flags"] = {SafetensorsDtype::BOOL, {3}, std::vector<std::byte>(3)};
        tensors["packed"] = {SafetensorsDtype::F4, {4}, std::vector<std::byte>(2)};
        writeSafetensors(file, tensors);
        const SafetensorsFile st(file);
        QVERIFY(st.find("step")->dtype == SafetensorsDtype::I64);
        QCOMPARE(st.find("packed")->byteSize(), std::uint64_t{2});
        const std::string m = errorOf([&] { (void)st.readFloat32("step"); });
        EXPECT_MESSAGE(m, file);
        EXPECT_MESSAGE(m, "tensor 'step' has dtype I64");
        EXPECT_MESSAGE(errorOf([&] { (void)st.readFloat32("flags"); }), "tensor 'flags' has dtype BOOL");
        for (const char* name :
             {"BOOL",    "U8",          "I8",          "I16", "U16",     "F16",    "BF16",    "I32",
              "U32",     "F32",         "F64",         "I64", "U64",     "C64",    "F8_E4M3", "F8_E5M2",
              "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F4",  "F6_E2M3", "F6_E3M2"})
            QVERIFY(toString(parseSafetensorsDtype(name)) == std::string_view(name));
    }

    void writerRejectsWrongByteCount() {
        const std::string file = path("writer.safetensors");
        std::map<std::string, SafetensorsTensorData> tensors;
        tensors["bad.weight"] = {SafetensorsDtype::F32, {2, 2}, std::vector<std::byte>(12)};
        const std::string m = errorOf([&] { writeSafetensors(file, tensors); });
        EXPECT_MESSAGE(m, "tensor 'bad.weight': 12 bytes do not match shape [2, 2] of F32");
    }
};

QTEST_GUILESS_MAIN(TestSafetensors)
#include "tst_safetensors.moc"
