#include "harness/common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "harness/common/error.h"

namespace dbh::harness {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

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
  std::string dir = std::filesystem::path(path).parent_path().string();
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

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw ReportError(path + ": expected a writable file, got: " + std::strerror(errno));
  }
  const char* p = text.data();
  size_t left = text.size();
  int err = 0;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw ReportError(path + ": expected a writable file, got a write error (" + std::strerror(err) + ")");
  }
  try {
    rename_into_place(tmp, path);
  } catch (...) {
    ::unlink(tmp.c_str());  // gone already when only the directory sync failed
    throw;
  }
}

void replace_file_atomically(const std::string& tmp, const std::string& path) {
  if (const int err = sync_file(tmp); err != 0) {
    throw ReportError(path + ": expected a writable file, got a write error (" + std::strerror(err) + ")");
  }
  rename_into_place(tmp, path);
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
  ::close(fd);
  const bool zip_end = read_ok && tail.find(std::string("PK\x05\x06", 4)) != std::string::npos;
  if (!zip_head || !zip_end) {
    fail(path, what, where, key,
         std::string(!zip_head ? "a file that is not one" : "a truncated archive (no end record)") + ", " +
             std::to_string(size) + " bytes");
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

}  // namespace dbh::harness
