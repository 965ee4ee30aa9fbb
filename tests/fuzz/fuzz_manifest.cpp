// Fuzz target: a run manifest (<run-id>.json, the tessera-manifest PNG chunk, a compare A/B
// file), read as the history and compare do: bounded JSON parsing, then runRecordFromManifest.
// Input may only be rejected with a std::runtime_error (InputFileError, ValidationError, or the
// reader's own, naming the key) with a readable message; a record whose settings validate must
// be written (manifestJson) and read back unchanged.
#include "tests/fuzz/FuzzSupport.h"

#include "core/run/RunConfig.h"
#include "core/run/RunRecordIO.h"

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    RunRecord record;
    try {
        record = runRecordFromManifest(parseBoundedJson(fuzz::asText(data, size), "manifest", "the fuzz input"));
    } catch (const std::runtime_error& e) {
        fuzz::checkRejection(e);
        return 0;
    }
    if (validateAll(record.config).empty())
        fuzz::checkRoundTrip(manifestJson(record), runRecordFromManifest, manifestJson, "run manifest");
    (void)timingsCsv(record);
    (void)chromeTrace({&record});
    return 0;
}
