// What the benchmarks of `tessera-cli bench` share in their output: the engine's notes collected
// per row, rows that failed kept in the table, the printed table's columns, the CSV written whole
// after the last row (core/run/OutputSet.h: all or nothing), the date line and the GPUs' peaks.
// Qt-free.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/run/Engine.h"
#include "core/run/OutputSet.h"

namespace tessera {

// Collects nothing but the engine's notes; progress is one line per run.
class BenchNotes : public RunObserver {
public:
    void onMessage(const std::string& message) override { messages.push_back(message); }
    std::vector<std::string> messages;
};

// Right-aligned columns, two spaces apart, under the head line.
void printCells(std::ostream& out, const std::vector<std::string>& head,
                const std::vector<std::vector<std::string>>& cells);

// `note` appended to `notes` after "; " (nothing before the first).
void appendNote(std::string& notes, const std::string& note);

// The current UTC date and time, "2026-11-24 06:15 UTC", for the benchmark's first line.
std::string benchDate();

// Dense fp16/bf16 tensor-core peak in TFLOP/s for a GPU name (e.g. "NVIDIA H100 80GB HBM3"
// -> 989), or nullopt when the name is not one we know.
std::optional<double> denseTensorPeakTflops(std::string_view deviceName);

// The CSV's folder checked before the first run (ValidationError "csv"): a header and `rows`
// rows, each well under 1 KiB.
void checkBenchCsv(const std::string& path, std::uintmax_t rows);

// The rows' CSV, written whole after the last row. False, after saying why on `err`, when it
// could not be written.
template <typename Row, typename Line>
bool writeBenchCsv(const std::string& path, const std::string& header, const std::vector<Row>& rows, Line line,
                   std::ostream& err) {
    std::string csv = header + "\n";
    for (const Row& row : rows) csv += line(row) + "\n";
    try {
        writeTextFileAtomically(path, csv);
    } catch (const std::exception& e) {
        err << "tessera-cli bench: csv: " << e.what() << "\n";
        return false;
    }
    return true;
}

// A row whose runs threw: kept in the table and the CSV, marked failed, the error as its note.
template <typename Row>
void markFailed(Row& row, const std::exception& e, std::ostream& err) {
    row.failed = true;
    row.note = std::string("failed: ") + e.what();
    err << " " << row.note << "\n";
}

}  // namespace tessera
