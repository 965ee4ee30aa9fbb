// For the core test suites (header-only, not a suite): what a call throws, as text, and a check
// that a message says something. Errors that carry the setting they concern (InputFileError,
// ModelError, ValidationError) show it first: "[model] 'x/config.json': ...".
#pragma once

#include <QtTest/QtTest>

#include <functional>
#include <stdexcept>
#include <string>
#include <typeinfo>

#include "core/base/BoundedInput.h"
#include "core/run/RunConfig.h"

namespace tessera::testing {

inline std::string errorOf(const std::function<void()>& f) {
    try {
        f();
    } catch (const InputFileError& e) {
        return "[" + e.field() + "] " + e.what();
    } catch (const ValidationError& e) {
        return "[" + e.field() + "] " + e.what();
    } catch (const std::exception& e) {
        return std::string("<") + typeid(e).name() + "> " + e.what();
    }
    return "<no error>";
}

}  // namespace tessera::testing

// The message holds `part` (a std::string or literal).
#define EXPECT_MESSAGE(message, part)                                                                        \
    do {                                                                                                     \
        const std::string m_ = (message);                                                                    \
        QVERIFY2(m_.find(part) != std::string::npos, ("'" + std::string(part) + "' not in: " + m_).c_str()); \
    } while (0)
