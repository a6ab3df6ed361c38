#pragma once

// Note [dbh's files in a trial]
// The trial's folder is the worker's (DBH_TRIAL_DIR: its checkpoints, its own
// files), and a training may well write a file named events.jsonl or
// stdout.log there. dbh's journal and logs are therefore written in a folder
// beside it that the worker is never told of, and moved into the trial's
// folder once every process of the trial has ended: a file of the worker's
// by one of those names is kept as worker-<name>, and the trial says so.
// A worker that truncates or replaces a file in its folder never touches
// dbh's record of what it said. While the trial runs (and should dbh itself
// be killed before it ends), they are in `.<trial>.dbh/` beside the trial's
// folder (`out/.main.dbh/events.jsonl` for `out/main`).

#include <filesystem>
#include <string>
#include <vector>

namespace dbh::harness::supervisor::internal {

/// dbh's files of one trial (stdout.log, stderr.log, events.jsonl): written
/// in stage() while the trial runs, moved into the trial's folder by
/// publish(). Destroyed unpublished, it removes the stage.
class TrialFiles {
 public:
  static constexpr const char* kNames[] = {"stdout.log", "stderr.log", "events.jsonl"};

  explicit TrialFiles(const std::filesystem::path& dir);
  ~TrialFiles();
  TrialFiles(const TrialFiles&) = delete;
  TrialFiles& operator=(const TrialFiles&) = delete;

  /// The folder beside the trial's where dbh writes them meanwhile.
  const std::filesystem::path& stage() const { return stage_; }

  /// Moves dbh's files into the trial's folder; the names of the worker's
  /// files that were in their way go to `displaced` (each kept as
  /// worker-<name>).
  void publish(std::vector<std::string>* displaced);

 private:
  std::filesystem::path dir_, stage_;
  bool published_ = false;
};

}  // namespace dbh::harness::supervisor::internal
