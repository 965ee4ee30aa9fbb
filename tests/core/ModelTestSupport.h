// Helpers of the model-loading suites (tst_unetmodel, tst_vae): error messages, files written
// for a test, safetensors encodings. Header-only; tests/CMakeLists.txt builds only tst_*.cpp.
#pragma once

#include <QtTest/QtTest>

#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>

#include "core/formats/ModelWeights.h"
#include "core/formats/Safetensors.h"

// `part` must occur in `message`; a failure shows both.
#define EXPECT_MESSAGE(message, part)                     \
    QVERIFY2((message).find(part) != std::string::npos,   \
             qPrintable(QStringLiteral("'%1' not in: %2") \
                            .arg(QString::fromStdString(std::string(part)), QString::fromStdString(message))))

namespace model_test {

// The message of the ModelError `f` throws; other exceptions are marked as such.
inline std::string errorOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const tessera::ModelError& e) {
        return e.what();
    } catch (const std::exception& e) {
        return std::string("<not a ModelError> ") + e.what();
    }
    return "<no error>";
}

// The message of any exception `f` throws (config readers throw std::runtime_error).
inline std::string configErrorOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "<no error>";
}

inline void writeText(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
}

inline std::string readBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::map<std::string, tessera::SafetensorsTensorData> encode(
    const std::map<std::string, tessera::HostTensor>& tensors,
    tessera::SafetensorsDtype dtype = tessera::SafetensorsDtype::F32) {
    std::map<std::string, tessera::SafetensorsTensorData> out;
    for (const auto& [name, t] : tensors) out[name] = {dtype, t.shape, tessera::encodeFloats(dtype, t.data)};
    return out;
}

// A float32 value as it reads back from a file of `dtype`.
inline float storedAs(tessera::SafetensorsDtype dtype, float x) {
    using tessera::SafetensorsDtype;
    return dtype == SafetensorsDtype::F16    ? tessera::halfToFloat(tessera::floatToHalf(x))
           : dtype == SafetensorsDtype::BF16 ? tessera::bfloat16ToFloat(tessera::floatToBfloat16(x))
                                             : x;
}

}  // namespace model_test
