#include "harness/common/output_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/out_file.h"

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

// Note [A re-run replaces the previous outputs]: a command run again into the
// folder of its previous run (same owner) must leave either the new outputs
// or the old ones, never a mix: a report of one run beside the events of
// another, or a checkpoint the new run never wrote. So once the lock is held
// the entries the previous run made (listed at its end in `.dbh-made`; never
// a file the user put there) are moved into `.dbh-previous/`. When the new
// run completes that folder is removed; when it fails, what it created is
// removed and the previous entries are moved back. Renames only: no copy, no
// extra disk. A command killed outright (SIGKILL, power) cannot do either, so
// every replacing claim first records the entries that stay (`.dbh-claimed`:
// those not in `.dbh-made`), and the next claim of the folder finishes the
// killed one's failure path: what is on neither list is removed and
// `.dbh-previous/` moved back.
// `dbh suite --resume` continues a folder instead (Reuse::kContinue): a
// killed suite's journal is what it resumes from.

namespace {

constexpr const char* kLockName = ".dbh.lock";
constexpr const char* kOwnerName = ".dbh-owner";
constexpr const char* kMadeName = ".dbh-made";          // entries dbh's committed runs made, one per line
constexpr const char* kClaimedName = ".dbh-claimed";    // entries present when a replacing run claimed
constexpr const char* kPreviousName = ".dbh-previous";  // the previous run's entries during a re-run

// dbh's own bookkeeping entries: never outputs, never foreign.
bool is_control(const std::string& name) {
  if (name == kLockName || name == kPreviousName) return true;
  // The files dbh writes atomically, and their temporaries while it does.
  for (const char* file : {kOwnerName, kMadeName, kClaimedName}) {
    if (name == file || name.rfind(std::string(file) + ".tmp.", 0) == 0) return true;
  }
  return false;
}

[[noreturn]] void refuse(const fs::path& p, const std::string& expected, const std::string& got) {
  throw UsageError(p.string() + ": expected " + expected + ", got " + got);
}

std::string error_text(int err) { return std::string("an error (") + std::strerror(err) + ")"; }

// At most `max` bytes of the regular file `p`; "" when it is anything else (a
// link is not followed, a FIFO never blocks).
std::string read_small(const fs::path& p, size_t max = 4096) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string s;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    s.resize(std::min(max, static_cast<size_t>(st.st_size) + 1));
    const ssize_t n = ::pread(fd, s.data(), s.size(), 0);
    s.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  ::close(fd);
  return s;
}

// The names listed one per line in the regular file `p` (not followed);
// empty when it is missing or anything else.
std::set<std::string> read_names(const fs::path& p) {
  std::set<std::string> names;
  const std::string s = read_small(p, 16 << 20);
  size_t start = 0;
  for (size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1) {
    const std::string name = s.substr(start, nl - start);
    // Only plain entry names of this folder: never a path elsewhere.
    if (!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos && !is_control(name)) {
      names.insert(name);
    }
  }
  return names;
}

std::string names_text(const std::set<std::string>& names) {
  std::string text;
  for (const auto& n : names) {
    if (n.find('\n') == std::string::npos) text += n + "\n";  // a name with a newline is never listed
  }
  return text;
}

// Entries of the folder `abs`, dbh's bookkeeping left out.
std::set<std::string> output_entries(const fs::path& abs) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(abs, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_control(name)) names.insert(name);
  }
  return names;
}

// Moves `from` (not followed) to `to`, replacing nothing: false on failure.
bool move_entry(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(to, ec))) return false;
  return ::rename(from.c_str(), to.c_str()) == 0;
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
    if (is_control(name)) continue;  // the owner file being written too
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

OutputDir::OutputDir(fs::path path, std::string owner, Reuse reuse, std::vector<std::string> inputs)
    : path_(std::move(path)), owner_(std::move(owner)), reuse_(reuse), inputs_(std::move(inputs)) {
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
    finish_killed_claim();
    if (reuse_ == Reuse::kReplace) stage_previous();
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

bool OutputDir::holds_new_output() const {
  if (!armed_) return false;
  for (const auto& name : output_entries(abs_)) {
    if (before_.count(name) == 0) return true;
  }
  return false;
}

// Note [A re-run replaces the previous outputs]: the failure path of a
// replacing claim whose command was killed, when its `.dbh-claimed` is still
// there (we hold the lock, so that command is gone).
void OutputDir::finish_killed_claim() {
  const fs::path claimed_file = abs_ / kClaimedName;
  std::error_code ec;
  if (!fs::is_regular_file(fs::symlink_status(claimed_file, ec))) return;
  const std::set<std::string> claimed = read_names(claimed_file);
  const std::set<std::string> made = read_names(abs_ / kMadeName);  // the killed command never wrote it
  const fs::path previous = abs_ / kPreviousName;
  const bool staged = fs::is_directory(fs::symlink_status(previous, ec));
  for (const auto& name : output_entries(abs_)) {
    if (claimed.count(name)) continue;
    // A previous output the killed command had not yet moved aside (it
    // could write nothing before they all were).
    if (made.count(name) && !fs::exists(fs::symlink_status(previous / name, ec))) continue;
    std::error_code rm;
    fs::remove_all(abs_ / name, rm);  // the killed command's partial output
    before_.erase(name);
  }
  if (staged) {
    for (const auto& e : fs::directory_iterator(previous, ec)) {
      const std::string name = e.path().filename().string();
      if (move_entry(e.path(), abs_ / name)) before_.insert(name);
    }
    std::error_code rm;
    fs::remove(previous, rm);  // only when empty: what could not move back stays
  }
  fs::remove(claimed_file, ec);
}

void OutputDir::stage_previous() {
  const std::set<std::string> made = read_names(abs_ / kMadeName);
  // What stays here (the user's files), for a killed run's successor
  // (finish_killed_claim), written before anything moves.
  std::set<std::string> staying;
  for (const auto& name : output_entries(abs_)) {
    if (!made.count(name)) staying.insert(name);
  }
  try {
    write_file_atomically((abs_ / kClaimedName).string(), names_text(staying));
  } catch (const ReportError& e) {
    throw UsageError(e.what());
  }
  claimed_written_ = true;
  if (made.empty()) return;
  const fs::path previous = abs_ / kPreviousName;
  std::error_code ec;
  if (fs::exists(fs::symlink_status(previous, ec))) {
    refuse(previous, "no folder of that name (dbh's own, left by a run it could not restore)",
           describe_path(previous.string()) + "; move it away");
  }
  if (::mkdir(previous.c_str(), 0755) != 0) refuse(previous, "a folder dbh can create", error_text(errno));
  for (const auto& name : made) {
    // dbh never makes a link there: one at a listed name is the user's.
    const fs::file_status st = fs::symlink_status(abs_ / name, ec);
    if (!fs::exists(st) || fs::is_symlink(st)) continue;
    // What the command reads (resume from its own checkpoint) stays.
    if (std::any_of(inputs_.begin(), inputs_.end(),
                    [&](const std::string& in) { return !in.empty() && path_within(in, (abs_ / name).string()); })) {
      continue;
    }
    if (!move_entry(abs_ / name, previous / name)) {
      refuse(abs_ / name, "an entry dbh can move aside while it replaces the previous outputs", error_text(errno));
    }
    before_.erase(name);  // no longer here: a new entry of that name is this command's
    staged_.insert(name);
  }
}

void OutputDir::release() noexcept {
  const fs::path previous = abs_ / kPreviousName;
  if (armed_ && !committed_) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(abs_, ec)) {
      const std::string name = e.path().filename().string();
      // The previous outputs and the record of the claim go last.
      if (name == kLockName || name == kPreviousName || name == kClaimedName || before_.count(name)) continue;
      std::error_code rm;
      fs::remove_all(e.path(), rm);  // links inside are removed, never followed
    }
    // The previous outputs come back as they were.
    for (const auto& name : staged_) move_entry(previous / name, abs_ / name);
    if (!staged_.empty()) fs::remove(previous, ec);  // only when empty
  }
  if (armed_ && committed_) {
    // The new outputs replace the previous ones; the list of what dbh made
    // is what it made now plus what it made before and is still here (a
    // continued suite's earlier scenarios). Best effort: a list that cannot
    // be written only means the next run leaves these entries alone.
    std::error_code ec;
    if (!staged_.empty()) fs::remove_all(previous, ec);
    std::set<std::string> made;
    const std::set<std::string> now = output_entries(abs_);
    for (const auto& name : now) {
      if (!before_.count(name)) made.insert(name);
    }
    for (const auto& name : read_names(abs_ / kMadeName)) {
      if (now.count(name)) made.insert(name);
    }
    try {
      write_file_atomically((abs_ / kMadeName).string(), names_text(made));
    } catch (...) {
    }
  }
  if (armed_ && claimed_written_) {
    std::error_code ec;
    fs::remove(abs_ / kClaimedName, ec);
  }
  staged_.clear();
  claimed_written_ = false;
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
