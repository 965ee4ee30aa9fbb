// ValidationError: bad user input, named by the field it came from; FieldError, what it shares
// with the errors about input files (BoundedInput.h InputFileError). Qt-free.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace tessera {

// An error about one input: what() is the full message, field() the setting it came from.
class FieldError : public std::runtime_error {
public:
    FieldError(std::string field, const std::string& message) : std::runtime_error(message), field_(std::move(field)) {}
    const std::string& field() const noexcept { return field_; }

private:
    std::string field_;
};

// Thrown (or returned) for bad user input. `field` is the RunConfig field name
// as spelled on the CLI (e.g. "tile", "overlap"); what() is the full message.
class ValidationError : public FieldError {
public:
    using FieldError::FieldError;
};

}  // namespace tessera
