// Small pieces the CLI's commands (cli_main, bench, compare, the option parser) share: how a
// bad value is refused and quoted, how numbers and CSV fields are written, and where the
// running executable lives. Qt-free.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// Throws ValidationError(field, "<field>: <message>").
[[noreturn]] void fail(const std::string& field, const std::string& message);

// The median (the mean of the middle two for an even count); 0 for none.
double median(std::vector<double> values);

// `value` with `decimals` digits after the point ("%.*f").
std::string fixed(double value, int decimals);

// `value` to `digits` significant digits ("%.4g" for 4, as the PyTorch scripts print).
std::string significant(double value, int digits);

// A CSV field: as it is, or quoted (quotes doubled, newlines as spaces) when it holds a comma,
// quote or newline.
std::string csvField(const std::string& text);

// The folder of the running executable (/proc/self/exe); empty when it cannot be read.
std::string executableDir();

// Usage text of `tessera-cli upscale` (app/cli/UpscaleCommand.h).
std::string upscaleUsage();

}  // namespace tessera
