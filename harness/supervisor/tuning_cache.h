#pragma once
// The measured-choices cache (Note [Measured choices], supervisor/tuning.h):
// one entry per setup, keyed by what a step's speed depends on, each file
// checked before it is believed and the folder kept to a bounded size.
// Internal to tuning.cc.

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/scenario/scenario.h"

namespace dbh::harness::supervisor::internal {

/// No training step of the model takes less: a shorter time in a cache entry
/// was not measured.
inline constexpr double kMinStepSeconds = 1e-5;

/// The cache key of `s`: this machine, its libraries, the step's code, the
/// variables that choose threads and kernels, and every setting a step's
/// speed depends on.
std::string tuning_key(const scenario::Scenario& s);

/// Holds an exclusive lock on a file for its lifetime (nothing when the file
/// cannot be opened: measuring twice is then the worst that can happen).
/// Waiting for another process's measurement stops when dbh is asked to stop.
class FileLock {
 public:
  explicit FileLock(const std::string& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool interrupted() const { return interrupted_; }

 private:
  int fd_;
  bool interrupted_ = false;
};

/// The cache entry at `file`, or null when there is none or it is anything
/// but a well-formed entry (a torn or hand-edited file, a FIFO, a link, a
/// huge file) of this machine: candidates within its `cores`, step times a
/// real step could take, and the choice the rule makes from those times
/// (choose_candidate with the scenario's defaults). The setup is then
/// measured again and the file replaced.
nlohmann::json read_cached(const std::filesystem::path& file, int64_t cores, bool default_channels_last,
                           int64_t default_threads);

/// Keeps the newest entries (each with its lock); removes nothing but the
/// cache's own files.
void trim_cache(const std::filesystem::path& dir);

}  // namespace dbh::harness::supervisor::internal
