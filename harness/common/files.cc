#include "harness/common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>

#include "harness/common/error.h"

namespace dbh::harness {
namespace fs = std::filesystem;

namespace {

std::string kind_of(mode_t mode) { return file_kind(mode); }

std::string errno_text(int err) {
  switch (err) {
    case ENOENT: return "none (no such file)";
    case ELOOP: return "a symlink loop (" + std::string(std::strerror(err)) + ")";
    case ENOTDIR: return "a path through a non-directory (" + std::string(std::strerror(err)) + ")";
    case EACCES: return "a file it may not read (" + std::string(std::strerror(err)) + ")";
    case ENAMETOOLONG: return "a name that is too long (" + std::string(std::strerror(err)) + ")";
    default: return std::string("an error (") + std::strerror(err) + ")";
  }
}

[[noreturn]] void fail(const std::string& path, const std::string& what, const std::string& where,
                       const std::string& key, const std::string& got) {
  std::string msg = where.empty() ? path : where;
  if (!key.empty()) msg += ": " + key;
  msg += ": expected " + what + ", got " + got;
  if (!where.empty()) msg += " (" + path + ")";
  throw ScenarioError(msg);
}

// fsync of the directory holding `path`, so a rename into it is durable.
// Returns 0 or the errno. A file system that cannot sync directories
// (EINVAL) has nothing more to do.
int sync_parent_dir(const std::string& path) {
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = ::fsync(fd) == 0 || errno == EINVAL ? 0 : errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

// fsync of the file at `path`; 0 or the errno.
int sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = ::fsync(fd) == 0 ? 0 : errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

// Renames `tmp` over `path` and syncs the directory; throws ReportError.
void rename_into_place(const std::string& tmp, const std::string& path) {
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw ReportError(path + ": cannot rename the temporary file: " + std::strerror(errno));
  }
  if (const int err = sync_parent_dir(path); err != 0) {
    throw ReportError(path + ": expected a writable folder, got an error syncing it (" + std::strerror(err) + ")");
  }
}

// Output roots (Note [Never through a link]), absolute and lexically normal.
std::mutex g_roots_mutex;
std::multiset<std::string>& output_roots() {
  static std::multiset<std::string> roots;
  return roots;
}

// `p` absolute and lexically normal, without a trailing separator.
fs::path clean_absolute(const fs::path& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  if (ec) a = p;
  a = a.lexically_normal();
  if (!a.has_filename() && a.has_relative_path()) a = a.parent_path();
  return a;
}

// The innermost output root that is `dir` or holds it; empty when none does.
fs::path root_holding(const fs::path& dir) {
  std::lock_guard<std::mutex> lock(g_roots_mutex);
  std::string best;
  for (const auto& r : output_roots()) {
    const fs::path rel = dir.lexically_relative(r);
    if (rel.empty() || *rel.begin() == "..") continue;
    if (r.size() > best.size()) best = r;
  }
  return best;
}

// Opens the folder `dir` (clean_absolute) for the *at() calls: down to its
// output root as open(2) does, below it one folder at a time with
// O_NOFOLLOW, so a link on the way is refused (ELOOP) rather than followed.
// Outside every root, `strict_last` still refuses a link at `dir` itself
// (a folder dbh descends into). Creates missing folders when `create`.
// Returns the descriptor, or -1 with errno set and `*failed` naming the
// folder that could not be opened.
int open_folder(const fs::path& dir, bool create, bool strict_last, fs::path* failed) {
  fs::path top = root_holding(dir);
  if (top.empty()) top = strict_last && dir.has_relative_path() ? dir.parent_path() : dir;
  std::error_code ec;
  if (create) fs::create_directories(top, ec);
  *failed = top;
  int fd = ::open(top.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  fs::path walk = top;
  for (const auto& part : dir.lexically_relative(top)) {
    if (part == "." || part.empty()) continue;
    walk /= part;
    *failed = walk;
    if (create && ::mkdirat(fd, part.c_str(), 0777) != 0 && errno != EEXIST) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return -1;
    }
    const int next = ::openat(fd, part.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    if (next < 0 && err == ENOTDIR) {
      struct stat st {};
      if (::fstatat(fd, part.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) err = ELOOP;
    }
    ::close(fd);
    if (next < 0) {
      errno = err;
      return -1;
    }
    fd = next;
  }
  return fd;
}

// Creates `name` in the folder `dir` as a new regular file open for writing
// (Note [Never through a link]). -1 and errno on failure.
int create_at(int dir, const std::string& name, int extra_flags) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::openat(dir, name.c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | extra_flags, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
    // Something is there: the name goes, never what it points to. A folder
    // stays (EISDIR).
    if (::unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT) return -1;
  }
  errno = EEXIST;
  return -1;
}

// What stands where a folder dbh writes in should be, in words.
std::string not_a_folder(const fs::path& p, int err) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      const fs::path to = fs::read_symlink(p, ec);
      return "a symlink" + (ec ? std::string() : " (to " + to.string() + ")") +
             ", which dbh never writes through";
    }
    if (!S_ISDIR(st.st_mode)) return kind_of(st.st_mode);
  }
  return errno_text(err);
}

}  // namespace

void add_output_root(const std::string& root) {
  const std::string r = clean_absolute(root).string();
  std::lock_guard<std::mutex> lock(g_roots_mutex);
  output_roots().insert(r);
}

void remove_output_root(const std::string& root) {
  const std::string r = clean_absolute(root).string();
  std::lock_guard<std::mutex> lock(g_roots_mutex);
  if (const auto it = output_roots().find(r); it != output_roots().end()) output_roots().erase(it);
}

int write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

int create_file_no_follow(const std::string& path, int extra_flags) {
  const fs::path p = clean_absolute(path);
  fs::path failed;
  const int dir = open_folder(p.parent_path(), /*create=*/false, /*strict_last=*/false, &failed);
  if (dir < 0) return -1;
  const int fd = create_at(dir, p.filename().string(), extra_flags);
  const int err = errno;
  ::close(dir);
  errno = err;
  return fd;
}

void make_directories_no_follow(const std::string& path) {
  const fs::path p = clean_absolute(path);
  fs::path failed;
  const int fd = open_folder(p, /*create=*/true, /*strict_last=*/true, &failed);
  if (fd < 0) {
    const int err = errno;
    throw ReportError(path + ": expected a folder dbh can write in, got " +
                      (failed == p ? std::string() : "at " + failed.string() + " ") + not_a_folder(failed, err));
  }
  ::close(fd);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const fs::path p = clean_absolute(path);
  const std::string name = p.filename().string();
  fs::path failed;
  const int dir = open_folder(p.parent_path(), /*create=*/false, /*strict_last=*/false, &failed);
  if (dir < 0) {
    const int err = errno;
    throw ReportError(path + ": expected a writable file, got a folder on the way that is " +
                      not_a_folder(failed, err) + " (" + failed.string() + ")");
  }
  const std::string tmp = name + ".tmp." + std::to_string(::getpid());
  const int fd = create_at(dir, tmp, 0);
  if (fd < 0) {
    const int err = errno;
    ::close(dir);
    throw ReportError(path + ": expected a writable file, got: " + std::strerror(err));
  }
  int err = write_all(fd, text.data(), text.size());
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlinkat(dir, tmp.c_str(), 0);
    ::close(dir);
    throw ReportError(path + ": expected a writable file, got a write error (" + std::strerror(err) + ")");
  }
  // renameat replaces whatever is at `name` (a link included) and never
  // writes through it.
  if (::renameat(dir, tmp.c_str(), dir, name.c_str()) != 0) {
    err = errno;
    ::unlinkat(dir, tmp.c_str(), 0);
    ::close(dir);
    throw ReportError(path + ": cannot rename the temporary file: " + std::strerror(err));
  }
  err = ::fsync(dir) == 0 || errno == EINVAL ? 0 : errno;
  ::close(dir);
  if (err != 0) {
    throw ReportError(path + ": expected a writable folder, got an error syncing it (" + std::strerror(err) + ")");
  }
}

void replace_file_atomically(const std::string& tmp, const std::string& path) {
  if (const int err = sync_file(tmp); err != 0) {
    throw ReportError(path + ": expected a writable file, got a write error (" + std::strerror(err) + ")");
  }
  rename_into_place(tmp, path);
}

std::string path_for_command(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(path, ec).lexically_normal();
  return ec ? path : absolute.string();
}

std::string describe_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno_text(errno);
  return kind_of(st.st_mode);
}

void check_input_file(const std::string& path, const std::string& what, const std::string& where,
                      const std::string& key) {
  if (path.empty()) fail(path, what, where, key, "an empty path");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail(path, what, where, key, errno_text(errno));
  if (!S_ISREG(st.st_mode)) fail(path, what, where, key, kind_of(st.st_mode));
  if (::access(path.c_str(), R_OK) != 0) fail(path, what, where, key, errno_text(errno));
}

namespace {

// Whether the zip archive open at `fd` (`size` bytes, `tail` its last bytes
// holding the end record) names the entries every LibTorch archive has: a
// `version` record and a pickle (`data.pkl`), under the archive's folder.
// True where the central directory lies beyond a 32-bit offset (zip64: not
// read here; LibTorch's own reader judges it).
bool zip_names_torch_entries(int fd, off_t size, const std::string& tail) {
  const size_t end = tail.rfind(std::string("PK\x05\x06", 4));
  if (end == std::string::npos || end + 22 > tail.size()) return false;
  auto u16 = [](const char* p) { return static_cast<uint32_t>(static_cast<unsigned char>(p[0])) |
                                        static_cast<uint32_t>(static_cast<unsigned char>(p[1])) << 8; };
  auto u32 = [&](const char* p) { return u16(p) | u16(p + 2) << 16; };
  const uint32_t cd_size = u32(tail.data() + end + 12), cd_offset = u32(tail.data() + end + 16);
  if (cd_offset == 0xFFFFFFFFu || cd_size == 0xFFFFFFFFu) return true;
  if (static_cast<off_t>(cd_offset) + static_cast<off_t>(cd_size) > size || cd_size > (64u << 20)) return false;
  std::string cd(cd_size, '\0');
  if (::pread(fd, cd.data(), cd.size(), cd_offset) != static_cast<ssize_t>(cd.size())) return false;
  bool version = false, pickle = false;
  for (size_t i = 0; i + 46 <= cd.size() && cd.compare(i, 4, std::string("PK\x01\x02", 4)) == 0;) {
    const size_t name_len = u16(cd.data() + i + 28), extra = u16(cd.data() + i + 30), comment = u16(cd.data() + i + 32);
    if (i + 46 + name_len > cd.size()) return false;
    const std::string name = cd.substr(i + 46, name_len);
    const std::string base = name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
    version = version || base == "version" || base == ".data/version";
    pickle = pickle || base == "data.pkl";
    i += 46 + name_len + extra + comment;
  }
  return version && pickle;
}

}  // namespace

void check_checkpoint_file(const std::string& path, const std::string& where, const std::string& key) {
  const std::string what = "a complete LibTorch checkpoint or weights file (a zip archive)";
  check_input_file(path, what, where, key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(path, what, where, key, errno_text(errno));
  struct stat st {};
  ::fstat(fd, &st);
  const off_t size = st.st_size;
  char head[4] = {};
  const bool zip_head = ::pread(fd, head, 4, 0) == 4 && std::memcmp(head, "PK\x03\x04", 4) == 0;
  // The end record is in the last 22 bytes plus at most a 64 KiB comment.
  const off_t tail_len = std::min<off_t>(size, 65536 + 22);
  std::string tail(static_cast<size_t>(tail_len), '\0');
  const bool read_ok = ::pread(fd, tail.data(), tail.size(), size - tail_len) == tail_len;
  const bool zip_end = read_ok && tail.find(std::string("PK\x05\x06", 4)) != std::string::npos;
  const bool torch_entries = zip_head && zip_end && zip_names_torch_entries(fd, size, tail);
  ::close(fd);
  if (!zip_head || !zip_end || !torch_entries) {
    fail(path, what, where, key,
         std::string(!zip_head  ? "a file that is not one"
                     : !zip_end ? "a truncated archive (no end record)"
                                : "a zip archive without LibTorch's entries (version, data.pkl)") +
             ", " + std::to_string(size) + " bytes");
  }
}

std::optional<std::string> read_regular_file(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uintmax_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return std::nullopt;
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || text.size() + static_cast<size_t>(n) > max_bytes) {
      ::close(fd);
      if (n == 0) return text;
      return std::nullopt;
    }
    text.append(buf, static_cast<size_t>(n));
  }
}

std::string read_input_file(const std::string& path, const std::string& what, size_t max_bytes) {
  check_input_file(path, what);
  // O_NONBLOCK: a FIFO swapped in after the check must not block the read.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) fail(path, what, "", "", errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, what, "", "", kind_of(st.st_mode));
  }
  if (static_cast<size_t>(st.st_size) > max_bytes) {
    ::close(fd);
    fail(path, what + " of at most " + std::to_string(max_bytes) + " bytes", "", "",
         std::to_string(st.st_size) + " bytes");
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail(path, what, "", "", std::string("a read error (") + std::strerror(err) + ")");
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      fail(path, what + " of at most " + std::to_string(max_bytes) + " bytes", "", "", "more");
    }
  }
  ::close(fd);
  return text;
}

std::string file_kind(unsigned int mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

std::string file_state(const std::string& path) {
  std::error_code ec;
  const std::string resolved = std::filesystem::weakly_canonical(path, ec).string();
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return resolved + '\0' + "none";
  // The change time and inode too: a copy that keeps the modification time
  // and size (cp -p, rsync -t, touch -r) or a file renamed over this one
  // changes one of them, and no user can set them back.
  return resolved + '\0' + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + '\0' +
         std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec) + '\0' +
         std::to_string(st.st_ino) + '\0' + std::to_string(S_ISDIR(st.st_mode) ? 0 : st.st_size);
}

std::optional<std::string> path_variable(const std::vector<std::string>& env) {
  std::optional<std::string> path;
  for (const auto& e : env) {
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  }
  return path;
}

std::string find_program(const std::string& program, const std::optional<std::string>& path_var,
                         const std::string& cwd) {
  namespace fs = std::filesystem;
  const fs::path base_dir = cwd.empty() ? fs::current_path() : fs::path(cwd);
  if (program.find('/') != std::string::npos) {
    return (fs::path(program).is_absolute() ? fs::path(program) : base_dir / program).string();
  }
  const auto runnable = [](const fs::path& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  const std::string dirs = path_var.value_or("/bin:/usr/bin");
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    const fs::path folder = dir.empty() ? base_dir : fs::path(dir).is_absolute() ? fs::path(dir) : base_dir / dir;
    if (runnable(folder / program)) return (folder / program).string();
    start = end + 1;
  }
  return "";
}

}  // namespace dbh::harness
