#pragma once

#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace dbh::harness {

/// An output folder owned by one command for as long as the object lives.
///
/// Claiming a folder creates it (with its parents) when missing and takes an
/// exclusive lock on it (`.dbh.lock`, holding the owner's pid): a second dbh
/// writing to the same folder stops with a usage error naming that pid. A
/// folder that holds something else is refused rather than mixed: an existing
/// non-empty folder is accepted only when dbh wrote it for the same `owner`
/// (recorded in `.dbh-owner`, e.g. "run /abs/scenario.yaml"). A path that is
/// not a directory, or that cannot be created or written, is a usage error
/// with the path and the errno.
///
/// Until commit() is called, destroying the object (an error, an exception)
/// removes what this command created and nothing else (Note [Removing only
/// what we made]): once the lock is held, the entries that were not there
/// when it was taken; and the folders it made on the way, when empty. A
/// command that did not get the lock removes nothing: the folder is someone
/// else's. Either way a lock this command held is released and its file
/// removed. While the lock is held the folder is an output root, below which
/// dbh's file helpers never follow a link (harness/common/files.h, Note
/// [Never through a link]).
///
/// A folder its owner wrote before is claimed to be replaced (Reuse::kReplace,
/// Note [A re-run replaces the previous outputs]): the entries that earlier
/// run made are set aside, removed when this command commits and put back
/// when it fails, so the folder never mixes two runs' outputs; files the user
/// put there are never touched. Reuse::kContinue keeps them (a resumed suite).
class OutputDir {
 public:
  enum class Reuse { kReplace, kContinue };
  /// `inputs`: files the command reads (weights, a checkpoint to resume
  /// from); an entry of the folder that holds one stays in place when the
  /// previous outputs are set aside, so a run can continue from its own.
  OutputDir(std::filesystem::path path, std::string owner, Reuse reuse = Reuse::kReplace,
            std::vector<std::string> inputs = {});
  ~OutputDir();
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// The outputs are complete: keep them.
  void commit() { committed_ = true; }
  /// Whether the folder existed before this command claimed it.
  bool existed() const { return existed_; }
  /// Whether this command has written anything into the folder yet (an
  /// entry that was not there when the lock was taken).
  bool holds_new_output() const;

 private:
  void release() noexcept;
  void finish_killed_claim();
  void stage_previous();

  std::filesystem::path path_;  // as given
  std::filesystem::path abs_;   // absolute, lexically normal
  std::string owner_;
  bool created_ = false;                      // this command made the folder itself
  std::vector<std::filesystem::path> made_;   // folders this command made, outermost first
  bool existed_ = false;
  bool committed_ = false;
  int lock_fd_ = -1;    // >= 0 only while this command holds the lock
  bool armed_ = false;  // the lock is held and before_ is complete
  std::set<std::string> before_;  // entries present when the lock was taken (and still there)
  Reuse reuse_ = Reuse::kReplace;
  std::set<std::string> staged_;   // the previous run's entries, moved into .dbh-previous
  bool claimed_written_ = false;   // .dbh-claimed is this command's
  std::vector<std::string> inputs_;  // files the command reads: their entries are never set aside
};

}  // namespace dbh::harness
