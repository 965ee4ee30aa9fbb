// `tessera-cli compare`: runs two run configurations, A and B, interleaved on one engine per
// backend (A B A B ...; warm-up pairs discarded) and reports B's speedup over A as the
// median of the per-pair time ratios with its spread, the median seconds, the per-step GPU
// time where measured, the peak device memory of each and the delta, the graph statistics,
// and the largest pixel difference between A's and B's final images. The time of a run is
// RunRecord::totalMs (sampling wall time, prepare excluded). A and B come from two JSON
// files (RunConfig JSON or an exported manifest) or from the render flags with KEY=VALUE
// overrides (--a graphs=off --b graphs=tile). Qt-free.
#pragma once

#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include "core/run/Engine.h"
#include "core/run/RunConfig.h"

namespace tessera {

struct CompareOptions {
    std::vector<std::string> configFiles;  // A.json B.json, or none
    std::vector<std::string> runFlags;     // the render flags given (e.g. "--steps", "4"), in order
    // RunConfig JSON keys and their values as typed, from --a / --b (applied in order).
    std::vector<std::pair<std::string, std::string>> overridesA, overridesB;
    int warmup = 1;                 // pairs run first and discarded
    int repeats = 5;                // measured pairs
    std::string csvPath, jsonPath;  // empty: not written
    bool help = false;
};

// Parses the words after "compare". Throws ValidationError naming the option ("repeats",
// "a", ...) for a bad value, "option" for an unknown option or a wrong number of files.
// A render flag's value is checked later, by compareConfigs.
CompareOptions parseCompareOptions(const std::vector<std::string>& args);
std::string compareUsage();

struct ComparedConfigs {
    RunConfig a, b;
    // A manifest's tuning.digest (core/run/RunRecord.h TuningInfo): the timed choices its run used;
    // "" when the side is not a manifest or it recorded none. compare notes a run whose
    // choices differ (its image may then differ in the last bits).
    std::string tuningDigestA, tuningDigestB;
};

// The two configurations, before the model is resolved: each file (or the render flags
// alone when no files are given), the render flags given on the line on top of a file, then
// --a / --b. KEY is a RunConfig JSON key ("batch", "graphs", "scheduler_options.eta"; '-' may
// stand for '_'; "eta" and "timestep_spacing" mean the scheduler_options ones). Throws
// ValidationError whose field() names the key, and whose message says where it came from
// (the file's path, "--a", "--b") and what is allowed. Files that do not exist or are not
// JSON are named in the message (field "a" or "b").
ComparedConfigs compareConfigs(const CompareOptions& options);

// Spread of per-pair ratios: median, extremes and the quartiles (linear interpolation
// between order statistics, as numpy's default). All zero for an empty list.
struct RatioSpread {
    double median = 0, min = 0, max = 0, q1 = 0, q3 = 0;
};
RatioSpread ratioSpread(std::vector<double> ratios);

// How far apart two final images are. comparable is false when the shapes differ (the
// other fields are then meaningless). maxAbsRgb8 is over the 8-bit RGB pixels (core/sampling/ImageOps.h
// toRgb8), maxAbsModel over the model-space floats; bitIdentical means the floats have the
// same bits.
struct ImageDifference {
    bool comparable = false;
    int maxAbsRgb8 = 0;
    double maxAbsModel = 0;
    bool bitIdentical = false;
};
ImageDifference imageDifference(const ImageTensor& a, const ImageTensor& b);

// Runs the comparison. Progress goes to `err`, the report to `out`. Returns the exit
// status: 0 success, 2 invalid input (the message names the key, file or option; with no
// files, run options, --a or --b there is nothing to compare: the usage goes to `err`), 1 a
// failure while running.
int runCompareCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tessera
