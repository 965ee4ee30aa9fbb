// ValidationError: bad user input, named by the field it came from. Qt-free.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace tessera {

// Thrown (or returned) for bad user input. `field` is the RunConfig field name
// as spelled on the CLI (e.g. "tile", "overlap"); what() is the full message.
class ValidationError : public std::runtime_error {
public:
    ValidationError(std::string field, const std::string& message)
        : std::runtime_error(message), field_(std::move(field)) {}
    const std::string& field() const noexcept { return field_; }

private:
    std::string field_;
};

}  // namespace tessera
