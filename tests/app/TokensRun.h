// `tessera-cli tokens` run in the test's own process (app/cli/TokensCommand.h): no start-up per
// prompt, and arguments may hold any bytes. Header-only (not a suite: no tst_ prefix).
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "app/cli/TokensCommand.h"

namespace tessera::testing {

struct TokensRun {
    int exitCode = -1;
    std::string out, err;
};

inline TokensRun runTokens(const std::vector<std::string>& args) {
    std::ostringstream out, err;
    TokensRun r;
    r.exitCode = runTokensCommand(args, out, err, TESSERA_BINARY_DIR "/app");
    r.out = out.str();
    r.err = err.str();
    return r;
}

}  // namespace tessera::testing
