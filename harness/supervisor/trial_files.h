#pragma once

// Note [dbh's files in a trial]
// The trial's folder is the worker's (DBH_TRIAL_DIR: its checkpoints, its own
// files), and a training may well write a file named events.jsonl or
// stdout.log there, delete the folder, or put a link in its place. dbh's
// journal and logs are therefore files no path reaches while the trial runs:
// each is created beside the trial's folder under a name no one is told of
// and unlinked at once, so only dbh's descriptors hold it; no worker can
// truncate, replace or write it. Once every process of the trial has ended,
// their bytes are written into the trial's folder, checked by identity
// first: a folder that is no longer the one dbh made (a link in its place,
// or its parent replaced) is never written through; a link is removed and a
// fresh folder made in its place, and the trial says so. A file of the
// worker's by one of dbh's names is kept as worker-<name>, and the trial says
// so too. Should dbh itself be killed before the trial ends, the files go
// with it (the kernel frees them); the terminal and the worker's own files
// are what is left.

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace dbh::harness::supervisor::internal {

/// dbh's files of one trial (stdout.log, stderr.log, events.jsonl and, for a
/// hung worker, stacks.txt): written through descriptors while the trial
/// runs, copied into the trial's folder by publish(). Every descriptor is
/// closed when it is destroyed.
class TrialFiles {
 public:
  explicit TrialFiles(const std::filesystem::path& dir);
  ~TrialFiles();
  TrialFiles(const TrialFiles&) = delete;
  TrialFiles& operator=(const TrialFiles&) = delete;

  /// Makes the trial's folder (no link followed, files.h's Note [Never
  /// through a link]) and remembers it and its parent by identity. Throws
  /// ReportError naming the folder.
  void make_folder();

  /// A new file of dbh's that the trial's folder will hold as `name`, open
  /// for writing and reachable by no path; the descriptor is numbered above
  /// stderr and owned here. Throws ReportError naming the folder.
  int create(const std::string& name);

  /// Writes every file's bytes into the trial's folder as its name, after
  /// checking that the folder and its parent are the ones make_folder()
  /// made. The names of the worker's files in their way go to `displaced`
  /// (each kept as worker-<name>); what was found in place of the folder
  /// goes to `replaced` ("" when nothing was). Returns "" or why nothing
  /// could be written.
  std::string publish(std::vector<std::string>* displaced, std::string* replaced);

  /// The trial's folder.
  const std::filesystem::path& dir() const { return dir_; }

 private:
  struct File {
    std::string name;
    int fd = -1;
  };
  std::filesystem::path dir_;
  dev_t dev_ = 0, parent_dev_ = 0;
  ino_t ino_ = 0, parent_ino_ = 0;
  std::vector<File> files_;
  bool published_ = false;
};

}  // namespace dbh::harness::supervisor::internal
