#include "harness/supervisor/trial_files.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "harness/common/error.h"
#include "harness/common/files.h"

namespace dbh::harness::supervisor::internal {
namespace fs = std::filesystem;

namespace {

bool same(const struct stat& st, dev_t dev, ino_t ino) { return st.st_dev == dev && st.st_ino == ino; }

// The bytes of `from` (read from its start) into a new file `to`, created
// without following a link. "" or why not.
std::string copy_into(int from, const fs::path& to) {
  const int out = create_file_no_follow(to.string());
  if (out < 0) return to.string() + ": expected a file dbh can create, got an error (" + std::strerror(errno) + ")";
  std::vector<char> buf(size_t{1} << 20);
  off_t at = 0;
  std::string error;
  while (true) {
    const ssize_t got = pread(from, buf.data(), buf.size(), at);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (const int err = write_all(out, buf.data(), static_cast<size_t>(got)); err != 0) {
      error = to.string() + ": expected a writable file, got a write error (" + std::strerror(err) + ")";
      break;
    }
    at += got;
  }
  close(out);
  return error;
}

}  // namespace

TrialFiles::TrialFiles(const fs::path& dir) : dir_(dir.lexically_normal()) {
  if (dir_.filename().empty()) dir_ = dir_.parent_path();
}

TrialFiles::~TrialFiles() {
  for (File& f : files_) {
    if (f.fd >= 0) close(f.fd);
  }
}

void TrialFiles::make_folder() {
  make_directories_no_follow(dir_.string());
  struct stat st {}, parent {};
  if (::lstat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::lstat(dir_.parent_path().c_str(), &parent) != 0) {
    throw ReportError(dir_.string() + ": expected the trial's folder dbh just made, got an error (" +
                      std::strerror(errno) + ")");
  }
  dev_ = st.st_dev, ino_ = st.st_ino, parent_dev_ = parent.st_dev, parent_ino_ = parent.st_ino;
}

int TrialFiles::create(const std::string& name) {
  // Beside the folder (its file system, so the bytes count where the
  // trial's do), under a random name, then unlinked.
  std::string pattern = (dir_.parent_path() / ("." + dir_.filename().string() + "." + name + ".XXXXXX")).string();
  int fd = mkostemp(pattern.data(), O_CLOEXEC);
  if (fd >= 0) ::unlink(pattern.c_str());
  if (fd >= 0 && fd <= STDERR_FILENO) {
    const int high = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    close(fd);
    fd = high;
  }
  if (fd < 0) {
    throw ReportError(dir_.parent_path().string() + ": expected a folder where dbh can create its " + name +
                      ", got an error (" + std::strerror(errno) + ")");
  }
  files_.push_back({name, fd});
  return fd;
}

std::string TrialFiles::publish(std::vector<std::string>* displaced, std::string* replaced) {
  if (published_) return "";
  published_ = true;
  struct stat parent {}, st {};
  if (::lstat(dir_.parent_path().c_str(), &parent) != 0 || !S_ISDIR(parent.st_mode) ||
      !same(parent, parent_dev_, parent_ino_)) {
    *replaced = dir_.parent_path().string() + " (the trial folder's parent)";
    return dir_.parent_path().string() + ": expected the folder dbh made for the trial, got another in its place: "
           "dbh's logs and journal of the trial were not written";
  }
  std::error_code ec;
  const bool present = ::lstat(dir_.c_str(), &st) == 0;
  if (!present || !S_ISDIR(st.st_mode) || !same(st, dev_, ino_)) {
    // A plain folder the worker made in place of dbh's (a training that
    // recreates its output folder) is written in; a link or a file is
    // removed, never followed, and a fresh folder made.
    if (present && !S_ISDIR(st.st_mode)) {
      *replaced = S_ISLNK(st.st_mode) ? "a link to " + fs::read_symlink(dir_, ec).string() : std::string("a file");
      fs::remove(dir_, ec);
    }
    try {
      make_directories_no_follow(dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
  }
  std::string error;
  for (File& f : files_) {
    const fs::path target = dir_ / f.name;
    if (::lstat(target.c_str(), &st) == 0) {
      const fs::path kept = dir_ / ("worker-" + f.name);
      fs::remove_all(kept, ec);
      if (::rename(target.c_str(), kept.c_str()) != 0) fs::remove_all(target, ec);
      displaced->push_back(f.name);
    }
    if (std::string e = copy_into(f.fd, target); !e.empty() && error.empty()) error = std::move(e);
    close(f.fd);
    f.fd = -1;
  }
  return error;
}

}  // namespace dbh::harness::supervisor::internal
