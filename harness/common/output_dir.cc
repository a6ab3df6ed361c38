#include "harness/common/output_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "harness/common/error.h"
#include "harness/common/files.h"

namespace dbh::harness {
namespace fs = std::filesystem;

// Note [Removing only what we made]: a command that fails removes what it
// created and nothing else, and it knows what it created only once it holds
// the lock: before that, another dbh may be writing the folder, and every
// entry in it is that run's (a second `dbh run` into a busy folder used to
// delete the first run's files on its way out). So the entries present when
// the lock was taken are listed first (armed_), and only the others are
// removed; without the lock nothing is. The folders this command made on the
// way to the output folder are removed with rmdir(2), which removes a folder
// only when it is empty: another command's files in one keep it.

namespace {

constexpr const char* kLockName = ".dbh.lock";
constexpr const char* kOwnerName = ".dbh-owner";

[[noreturn]] void refuse(const fs::path& p, const std::string& expected, const std::string& got) {
  throw UsageError(p.string() + ": expected " + expected + ", got " + got);
}

std::string error_text(int err) { return std::string("an error (") + std::strerror(err) + ")"; }

// At most 4096 bytes of the regular file `p`; "" when it is anything else (a
// link is not followed, a FIFO never blocks).
std::string read_small(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string s;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    s.resize(4096);
    const ssize_t n = ::pread(fd, s.data(), s.size(), 0);
    s.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  ::close(fd);
  return s;
}

// Whether `fd` and the entry `name` (not followed) are the same file.
bool same_file(int fd, const fs::path& name) {
  struct stat held {}, named {};
  return ::fstat(fd, &held) == 0 && ::lstat(name.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
         held.st_dev == named.st_dev;
}

// Refuses, without writing anything, a folder that holds what another
// command or something other than dbh wrote.
void check_contents(const fs::path& shown, const fs::path& abs, const std::string& owner) {
  size_t foreign = 0;
  std::string example;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(abs, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kLockName || name == kOwnerName) continue;
    if (name.rfind(std::string(kOwnerName) + ".tmp.", 0) == 0) continue;  // being written by its owner
    ++foreign;
    if (example.empty()) example = name;
  }
  if (ec) refuse(shown, "a readable output folder", "an error (" + ec.message() + ")");
  if (foreign == 0) return;
  const fs::path owner_file = abs / kOwnerName;
  if (!fs::is_regular_file(fs::symlink_status(owner_file, ec))) {
    refuse(shown, "an empty folder or one dbh wrote",
           "a folder with " + std::to_string(foreign) + " entr" + (foreign == 1 ? "y" : "ies") + " (e.g. \"" +
               example + "\") not written by dbh; choose another --out");
  }
  std::string previous = read_small(owner_file);
  while (!previous.empty() && previous.back() == '\n') previous.pop_back();
  if (previous != owner) {
    refuse(shown, "an empty folder or one written by \"" + owner + "\"",
           "one written by \"" + previous + "\"; choose another --out");
  }
}

}  // namespace

OutputDir::OutputDir(fs::path path, std::string owner) : path_(std::move(path)), owner_(std::move(owner)) {
  if (path_.empty()) refuse(path_, "an output folder", "an empty path");
  abs_ = fs::absolute(path_).lexically_normal();
  if (!abs_.has_filename() && abs_.has_relative_path()) abs_ = abs_.parent_path();
  try {
    // A folder that is not ours is refused before anything is written to it.
    {
      struct stat st {};
      if (::stat(abs_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) check_contents(path_, abs_, owner_);
    }
    // Create missing folders one by one, remembering those this command made.
    fs::path walk;
    for (const auto& part : abs_) {
      walk /= part;
      struct stat st {};
      if (::stat(walk.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode)) refuse(walk, "a folder for the output", describe_path(walk.string()));
        continue;
      }
      if (errno != ENOENT) refuse(walk, "a folder for the output", describe_path(walk.string()));
      if (::mkdir(walk.c_str(), 0755) != 0) {
        if (errno != EEXIST) refuse(walk, "a folder dbh can create", error_text(errno));
        continue;  // made by another process meanwhile: not ours
      }
      made_.push_back(walk);
    }
    created_ = !made_.empty() && made_.back() == abs_;
    existed_ = !created_;
    if (::access(abs_.c_str(), W_OK | X_OK) != 0) refuse(path_, "a writable output folder", error_text(errno));
    // The lock: flock on a file inside the folder. The file may be removed by
    // its previous holder between our open and our flock; then we retry.
    const fs::path lock = abs_ / kLockName;
    for (int attempt = 0;; ++attempt) {
      const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
      if (fd < 0) {
        refuse(lock, "a lock file dbh can create",
               errno == ELOOP ? "a symlink, which dbh never writes through (remove it or choose another --out)"
                              : error_text(errno));
      }
      // A lock file dbh made is a plain file with one name: anything else
      // (a FIFO, a hard link to someone's file) is not written to.
      struct stat st {};
      if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        const bool regular = S_ISREG(st.st_mode);
        ::close(fd);
        refuse(lock, "a lock file dbh can create",
               regular ? "a file with " + std::to_string(st.st_nlink) + " names (remove it or choose another --out)"
                       : describe_path(lock.string()) + " (remove it or choose another --out)");
      }
      if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        ::close(fd);
        if (err == EWOULDBLOCK) {
          std::string holder = read_small(lock);
          while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
          refuse(path_, "an output folder no other dbh is writing to",
                 "one in use by " + (holder.empty() ? std::string("another dbh process") : holder) +
                     " (wait for it to finish or choose another --out)");
        }
        refuse(lock, "a lockable file", error_text(err));
      }
      if (same_file(fd, lock)) {
        lock_fd_ = fd;  // held from here on
        break;
      }
      ::close(fd);
      if (attempt > 100) refuse(lock, "a stable lock file", "one that keeps being replaced");
    }
    add_output_root(abs_.string());
    const std::string pid_text = "pid " + std::to_string(::getpid()) + "\n";
    if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, pid_text.data(), pid_text.size(), 0) < 0) {
      refuse(lock, "a writable lock file", error_text(errno));
    }
    // What is there already, listed now that no other dbh can add to it: what
    // is not on this list is this command's own (Note [Removing only what we
    // made]).
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(abs_, ec)) before_.insert(e.path().filename().string());
    if (ec) refuse(path_, "a readable output folder", "an error (" + ec.message() + ")");
    armed_ = true;
    check_contents(path_, abs_, owner_);  // again, under the lock
    const fs::path owner_file = abs_ / kOwnerName;
    if (read_small(owner_file) != owner_ + "\n") {
      try {
        write_file_atomically(owner_file.string(), owner_ + "\n");
      } catch (const ReportError& e) {
        throw UsageError(e.what());
      }
    }
  } catch (...) {
    release();
    throw;
  }
}

OutputDir::~OutputDir() { release(); }

void OutputDir::release() noexcept {
  if (armed_ && !committed_) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(abs_, ec)) {
      const std::string name = e.path().filename().string();
      if (name == kLockName || before_.count(name)) continue;
      std::error_code rm;
      fs::remove_all(e.path(), rm);  // links inside are removed, never followed
    }
  }
  armed_ = false;
  if (lock_fd_ >= 0) {
    remove_output_root(abs_.string());
    // Unlink while holding the lock, so a waiting process that opens the old
    // name notices the change (see the retry in the constructor); and only
    // the file this command locked.
    const fs::path lock = abs_ / kLockName;
    if (same_file(lock_fd_, lock)) ::unlink(lock.c_str());
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
  if (!committed_) {
    // The folders made on the way, innermost first, each only when empty.
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
      if (::rmdir(it->c_str()) != 0) break;
    }
  }
  made_.clear();
}

}  // namespace dbh::harness
