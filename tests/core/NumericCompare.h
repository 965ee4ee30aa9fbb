// Comparing computed tensors with reference fixtures (tst_cliptext, tst_sdxltext). Header-only;
// tests/CMakeLists.txt builds only tst_*.cpp.
#pragma once

#include <QString>
#include <QtTest/QtTest>

#include <algorithm>
#include <cmath>
#include <string>

// Empty when max |got - want| <= tolerance * max |want| (relative to the tensor's scale), else
// the worst element.
template <class A, class B>
QString mismatch(const std::string& what, const A& got, const B& want, double tolerance = 1e-4) {
    if (got.size() != want.size()) return QString::fromStdString(what) + ": sizes differ";
    double scale = 0, worst = 0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::abs(double(want[i])));
    for (std::size_t i = 0; i < want.size(); ++i)
        if (std::abs(double(got[i]) - double(want[i])) > worst) worst = std::abs(double(got[i]) - double(want[i])), at = i;
    if (worst <= tolerance * scale) return {};
    return QStringLiteral("%1: element %2 is %3, expected %4 (max |want| %5)")
        .arg(QString::fromStdString(what)).arg(at).arg(double(got[at]), 0, 'g', 9).arg(double(want[at]), 0, 'g', 9)
        .arg(scale);
}

#define EXPECT_CLOSE(what, got, want)                               \
    do {                                                            \
        const QString m_ = mismatch(what, got, want);               \
        QVERIFY2(m_.isEmpty(), qPrintable(m_));                     \
    } while (0)
