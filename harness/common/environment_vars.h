#pragma once

#include <map>
#include <string>
#include <vector>

namespace dbh::harness {

// Note [Variables that decide an outcome]: the environment variables that can
// change what a trial does (its numbers, the kernels it picks, the images it
// decodes, the libraries it loads) are part of every probe's cache key and of
// the input manifest a report shows; the others dbh reads only say where to
// write, how to report or which shard to run, and are listed apart. A
// variable is in exactly one list, and tests/unit/harness/environment_vars_test.cc
// fails when dbh's code (C++ or the Python adapter) reads one that is in
// neither: add it here, to the list it belongs to.

struct EnvironmentVariable {
  const char* name;  // a name, or a prefix ending in '_' that covers a family
  const char* why;
};

/// Variables (and families, by prefix) that can change a trial's outcome:
/// OpenMP/oneDNN/MKL threading and kernels, OpenCV's decoding limits, CUDA,
/// cuDNN and cuBLAS settings, PyTorch's allocator and flags, the loader's
/// preloads and search paths, Python's for an external worker, DBH_HOME.
const std::vector<EnvironmentVariable>& outcome_variables();

/// Variables dbh reads that do not change an outcome: where its caches and
/// outputs go, CI reporting, sharding, the per-trial worker protocol.
const std::vector<EnvironmentVariable>& reporting_variables();

/// Whether `name` is covered by an entry of `list` (exactly, or by a prefix
/// entry ending in '_').
bool covered_by(const std::vector<EnvironmentVariable>& list, const std::string& name);

/// The outcome variables set in `env` (name → value), sorted by name.
std::map<std::string, std::string> outcome_environment(const std::map<std::string, std::string>& env);

/// outcome_environment of this process's environment.
std::map<std::string, std::string> outcome_environment();

}  // namespace dbh::harness
