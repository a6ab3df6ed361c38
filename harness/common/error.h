#pragma once

#include <stdexcept>
#include <string>

namespace dbh::harness {

/// The exit status of a dbh process that failed inside dbh itself (a bug,
/// never a finding about the training): `dbh` and its built-in worker alike.
inline constexpr int kInternalErrorExit = 3;

/// The exit status of a command whose question this machine cannot run (a
/// device it lacks): neither a pass nor a failure (git bisect's "cannot
/// test"; `--bisect-exit` maps it to 125).
inline constexpr int kNotRunHereExit = 4;

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

/// The question a search asks cannot be run on this machine: its first trial
/// (the reproduction, the full run, the source setup) was skipped for want of
/// a device. A search over trials that never ran answers nothing (exit
/// kNotRunHereExit).
class NotRunHere : public Error {
 public:
  using Error::Error;
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
