#pragma once

#include <stdexcept>
#include <string>

namespace dbh::harness {

/// The exit status of a dbh process that failed inside dbh itself (a bug,
/// never a finding about the training): `dbh` and its built-in worker alike.
inline constexpr int kInternalErrorExit = 3;

/// Root of the harness's exceptions. Messages say where, what was expected
/// and what was found. Outcomes of trials are values, never exceptions.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Something the user has to fix: bad input, or an output that cannot be
/// written (exit code 2). Commands report it as "dbh: <what>".
class UsageError : public Error {
 public:
  using Error::Error;
};

/// A scenario, override or CLI value is wrong (exit code 2).
class ScenarioError : public UsageError {
 public:
  using UsageError::UsageError;
};

/// A worker could not be started.
class SpawnError : public Error {
 public:
  using Error::Error;
};

/// An event stream line that does not decode.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

/// A report could not be written: unwritable folder, full disk (exit code 2).
class ReportError : public UsageError {
 public:
  using UsageError::UsageError;
};

}  // namespace dbh::harness
