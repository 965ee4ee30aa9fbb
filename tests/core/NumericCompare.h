// Comparing computed tensors with each other and with reference fixtures. Header-only;
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
        if (std::abs(double(got[i]) - double(want[i])) > worst)
            worst = std::abs(double(got[i]) - double(want[i])), at = i;
    if (worst <= tolerance * scale) return {};
    return QStringLiteral("%1: element %2 is %3, expected %4 (max |want| %5)")
        .arg(QString::fromStdString(what))
        .arg(at)
        .arg(double(got[at]), 0, 'g', 9)
        .arg(double(want[at]), 0, 'g', 9)
        .arg(scale);
}

// max |got - want| / max |want|; infinity when the sizes differ.
template <class A, class B>
double maxRelativeError(const A& got, const B& want) {
    if (got.size() != want.size()) return INFINITY;
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
        scale = std::max(scale, std::abs(double(want[i])));
    }
    return diff / std::max(scale, 1e-30);
}

// ||got - want|| / ||want|| in double; infinity when the sizes differ.
template <class A, class B>
double relativeL2(const A& got, const B& want) {
    if (got.size() != want.size()) return INFINITY;
    double num = 0, den = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        num += (double(got[i]) - double(want[i])) * (double(got[i]) - double(want[i]));
        den += double(want[i]) * double(want[i]);
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

// 10 log10(range^2 / MSE), range the reference's max - min; -infinity when the sizes differ.
template <class A, class B>
double psnrOverRange(const A& got, const B& want) {
    if (got.size() != want.size() || want.size() == 0) return -INFINITY;
    const auto [lo, hi] = std::minmax_element(want.begin(), want.end());
    double se = 0;
    for (std::size_t i = 0; i < want.size(); ++i) se += std::pow(double(got[i]) - double(want[i]), 2);
    const double mse = se / static_cast<double>(want.size()), range = double(*hi) - double(*lo);
    return mse == 0 ? INFINITY : 10 * std::log10(range * range / mse);
}

#define EXPECT_CLOSE(what, got, want)                 \
    do {                                              \
        const QString m_ = mismatch(what, got, want); \
        QVERIFY2(m_.isEmpty(), qPrintable(m_));       \
    } while (0)
