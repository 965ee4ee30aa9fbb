#include "app/cli/bench/BenchTable.h"

#include <algorithm>
#include <ctime>

namespace tessera {

namespace {

std::string pad(const std::string& text, std::size_t width) {
    return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

}  // namespace

void printCells(std::ostream& out, const std::vector<std::string>& head,
                const std::vector<std::vector<std::string>>& cells) {
    std::vector<std::size_t> widths(head.size());
    for (std::size_t c = 0; c < head.size(); ++c) {
        widths[c] = head[c].size();
        for (const auto& row : cells) widths[c] = std::max(widths[c], row[c].size());
    }
    for (std::size_t c = 0; c < head.size(); ++c) out << (c ? "  " : "") << pad(head[c], widths[c]);
    out << "\n";
    for (const auto& row : cells) {
        for (std::size_t c = 0; c < row.size(); ++c) out << (c ? "  " : "") << pad(row[c], widths[c]);
        out << "\n";
    }
}

void appendNote(std::string& notes, const std::string& note) { notes += (notes.empty() ? "" : "; ") + note; }

std::string benchDate() {
    const std::time_t now = std::time(nullptr);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    return text;
}

std::optional<double> denseTensorPeakTflops(std::string_view name) {
    auto has = [&](std::string_view part) { return name.find(part) != std::string_view::npos; };
    // Datasheet dense (no sparsity) fp16/bf16 tensor throughput at boost clock.
    if (has("H100")) {
        if (has("PCIe")) return 756.0;
        if (has("NVL")) return 835.0;
        return 989.0;  // SXM5 (reported as "NVIDIA H100 80GB HBM3")
    }
    if (has("H200")) return 989.0;  // also GH200's name
    if (has("A100")) return 312.0;
    if (has("L40S")) return 362.0;
    if (has("A10G")) return 70.0;
    if (has("RTX 4090")) return 165.0;
    return std::nullopt;
}

void checkBenchCsv(const std::string& path, std::uintmax_t rows) {
    const std::uintmax_t bytes = (4u << 10) + (1u << 10) * rows;
    checkOutputFile(path, "csv", OutputNeeds{bytes, bytes, {}});
}

}  // namespace tessera
