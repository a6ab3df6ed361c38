#include "harness/common/output_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "harness/common/error.h"
#include "harness/common/files.h"

namespace dbh::harness {
namespace fs = std::filesystem;

namespace {

constexpr const char* kLockName = ".dbh.lock";
constexpr const char* kOwnerName = ".dbh-owner";

[[noreturn]] void refuse(const fs::path& p, const std::string& expected, const std::string& got) {
  throw UsageError(p.string() + ": expected " + expected + ", got " + got);
}

std::string read_small(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return s.size() > 4096 ? s.substr(0, 4096) : s;
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
    ++foreign;
    if (example.empty()) example = name;
  }
  if (ec) refuse(shown, "a readable output folder", "an error (" + ec.message() + ")");
  if (foreign == 0) return;
  const fs::path owner_file = abs / kOwnerName;
  if (!fs::is_regular_file(owner_file)) {
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
  const fs::path abs = fs::absolute(path_).lexically_normal();
  // A folder that is not ours is refused before anything is written to it.
  {
    struct stat st {};
    if (::stat(abs.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) check_contents(path_, abs, owner_);
  }
  // Create missing parents one by one, remembering the topmost one created.
  fs::path walk;
  for (const auto& part : abs) {
    walk /= part;
    struct stat st {};
    if (::stat(walk.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) refuse(walk, "a folder for the output", describe_path(walk.string()));
      continue;
    }
    if (errno != ENOENT) refuse(walk, "a folder for the output", describe_path(walk.string()));
    if (::mkdir(walk.c_str(), 0755) != 0 && errno != EEXIST) {
      refuse(walk, "a folder dbh can create", std::string("an error (") + std::strerror(errno) + ")");
    }
    if (first_created_.empty()) first_created_ = walk;
    if (walk == abs) created_ = true;
  }
  existed_ = !created_;
  try {
    if (::access(abs.c_str(), W_OK | X_OK) != 0) {
      refuse(path_, "a writable output folder", std::string("an error (") + std::strerror(errno) + ")");
    }
    // The lock: flock on a file inside the folder. The file may be removed by
    // its previous holder between our open and our flock; then we retry.
    const fs::path lock = abs / kLockName;
    for (int attempt = 0;; ++attempt) {
      lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (lock_fd_ < 0) {
        refuse(lock, "a lock file dbh can create", std::string("an error (") + std::strerror(errno) + ")");
      }
      if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        ::close(lock_fd_);
        lock_fd_ = -1;
        if (err == EWOULDBLOCK) {
          std::string holder = read_small(lock);
          while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
          refuse(path_, "an output folder no other dbh is writing to",
                 "one in use by " + (holder.empty() ? std::string("another dbh process") : holder) +
                     " (wait for it to finish or choose another --out)");
        }
        refuse(lock, "a lockable file", std::string("an error (") + std::strerror(err) + ")");
      }
      struct stat held {}, named {};
      if (::fstat(lock_fd_, &held) == 0 && ::stat(lock.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
          held.st_dev == named.st_dev) {
        break;
      }
      ::close(lock_fd_);
      lock_fd_ = -1;
      if (attempt > 100) refuse(lock, "a stable lock file", "one that keeps being replaced");
    }
    const std::string pid_text = "pid " + std::to_string(::getpid()) + "\n";
    if (::ftruncate(lock_fd_, 0) != 0 || ::write(lock_fd_, pid_text.data(), pid_text.size()) < 0) {
      refuse(lock, "a writable lock file", std::string("an error (") + std::strerror(errno) + ")");
    }
    // What is there already (checked again now that the lock is held).
    for (const auto& e : fs::directory_iterator(abs)) before_.insert(e.path().filename().string());
    check_contents(path_, abs, owner_);
    const fs::path owner_file = abs / kOwnerName;
    if (read_small(owner_file) != owner_ + "\n") {
      std::ofstream(owner_file, std::ios::binary | std::ios::trunc) << owner_ << "\n";
    }
  } catch (...) {
    release();
    throw;
  }
}

OutputDir::~OutputDir() { release(); }

void OutputDir::release() noexcept {
  std::error_code ec;
  const fs::path abs = fs::absolute(path_, ec).lexically_normal();
  if (!committed_) {
    if (created_ || !first_created_.empty()) {
      fs::remove_all(first_created_.empty() ? abs : first_created_, ec);
    } else {
      for (const auto& e : fs::directory_iterator(abs, ec)) {
        const std::string name = e.path().filename().string();
        if (name == kLockName || before_.count(name)) continue;
        std::error_code rm;
        fs::remove_all(e.path(), rm);
      }
      if (!before_.count(kOwnerName)) fs::remove(abs / kOwnerName, ec);
    }
  }
  if (lock_fd_ >= 0) {
    // Unlink while holding the lock, so a waiting process that opens the old
    // name notices the change (see the retry in the constructor).
    if (fs::exists(abs)) ::unlink((abs / kLockName).c_str());
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
}

}  // namespace dbh::harness
