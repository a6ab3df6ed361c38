#pragma once

#include <filesystem>
#include <string>

namespace dbh::testing {

/// A new, empty folder under the test temp dir, named `prefix-XXXXXX`
/// (unique, so tests running side by side never share one).
std::filesystem::path fresh_dir(const std::string& prefix);

/// The whole file; empty when it cannot be read.
std::string read_text(const std::filesystem::path& path);

/// Writes `text` to `path`, creating its parent folders.
void write_text(const std::filesystem::path& path, const std::string& text);

/// `path`, registered to be removed (a file, or a folder with everything in
/// it) when the test program exits: for a temporary that outlives the test
/// that made it (a dataset several tests of a file share) or one a test
/// may not reach the end of.
std::filesystem::path removed_at_exit(std::filesystem::path path);

/// Removes a folder (and everything in it) when it goes out of scope.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(std::filesystem::path path) : path_(std::move(path)) {}
  ~RemoveOnExit();
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;

 private:
  std::filesystem::path path_;
};

/// A fresh_dir(prefix) for one test, removed with everything in it when it
/// goes out of scope, pass or fail: `const ScratchDir dir("dbh-x");` then
/// `dir / "out"`, or `dir.path()`.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) : path_(fresh_dir(prefix)), cleanup_(path_) {}
  const std::filesystem::path& path() const { return path_; }
  operator const std::filesystem::path&() const { return path_; }  // NOLINT: reads as the folder
  std::filesystem::path operator/(const std::filesystem::path& rel) const { return path_ / rel; }
  std::string string() const { return path_.string(); }

 private:
  std::filesystem::path path_;
  RemoveOnExit cleanup_;
};

}  // namespace dbh::testing
