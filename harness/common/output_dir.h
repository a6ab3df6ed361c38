#pragma once

#include <filesystem>
#include <set>
#include <string>

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
/// removes what the command created and nothing else: the whole folder when
/// the command created it, else the entries that were not there before.
/// Either way the lock is released and its file removed.
class OutputDir {
 public:
  OutputDir(std::filesystem::path path, std::string owner);
  ~OutputDir();
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  /// The outputs are complete: keep them.
  void commit() { committed_ = true; }
  /// Whether the folder existed before this command claimed it.
  bool existed() const { return existed_; }

 private:
  void release() noexcept;

  std::filesystem::path path_;
  std::string owner_;
  bool created_ = false;
  std::filesystem::path first_created_;  // the topmost folder this command created
  bool existed_ = false;
  bool committed_ = false;
  int lock_fd_ = -1;
  std::set<std::string> before_;  // entries present before the claim
};

}  // namespace dbh::harness
