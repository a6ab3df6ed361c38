#pragma once

#include <stdexcept>
#include <string>

namespace dbh::harness {

/// Root of the harness's exceptions. Messages say where, what was expected
/// and what was found. Outcomes of trials are values, never exceptions.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A scenario, override or CLI value is wrong (exit code 2).
class ScenarioError : public Error {
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

/// A report could not be written.
class ReportError : public Error {
 public:
  using Error::Error;
};

}  // namespace dbh::harness
