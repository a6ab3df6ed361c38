#include "harness/common/out_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <optional>
#include <vector>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/home.h"
#include "harness/common/text.h"

namespace dbh::harness {
namespace fs = std::filesystem;

namespace {

bool read_at(int fd, std::string* out, size_t n, off_t offset) {
  out->assign(n, '\0');
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, out->data() + done, n - done, offset + static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

// Why the file system holding `folder` takes no new file ("" when it may):
// mounted read-only, or one of the kernel's own (proc, sysfs, cgroup, …).
std::string takes_no_files(const std::string& folder) {
  struct statvfs vfs {};
  if (::statvfs(folder.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY) != 0) return "a read-only file system";
  struct statfs fs_info {};
  if (::statfs(folder.c_str(), &fs_info) != 0) return "";
  switch (static_cast<unsigned long>(fs_info.f_type)) {
    case 0x9fa0:      // PROC_SUPER_MAGIC
      return "the kernel's proc file system, which takes no files";
    case 0x62656572:  // SYSFS_MAGIC
      return "the kernel's sysfs, which takes no files";
    case 0x27e0eb:    // CGROUP_SUPER_MAGIC
    case 0x63677270:  // CGROUP2_SUPER_MAGIC
      return "a cgroup file system, which takes no files";
    case 0x64626720:  // DEBUGFS_MAGIC
      return "the kernel's debugfs, which takes no files";
    default:
      return "";
  }
}

}  // namespace

void check_output_file(const std::string& path, const OutputFileRule& rule) {
  const std::string prefix = rule.where + ": " + rule.flag + ": expected ";
  const std::string expected = "a new file" + (rule.replaceable.empty() ? std::string() : " or " + rule.replaceable);
  const auto fail = [&](const std::string& got, const std::string& hint = "") {
    throw UsageError(prefix + expected + (hint.empty() ? "" : " " + hint) + ", got " + got + " (" + path + ")");
  };
  if (path.empty()) fail("an empty path");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      std::string got = file_kind(st.st_mode);
      if (S_ISLNK(st.st_mode)) {
        std::error_code ec;
        const fs::path target = fs::read_symlink(path, ec);
        if (!ec) got += " to " + target.string();
      }
      fail(got);
    }
    if (!rule.may_replace || !rule.may_replace(path)) {
      fail(rule.replaceable.empty() ? std::string("a regular file") : "a regular file that is not " + rule.replaceable,
           rule.hint);
    }
  } else if (errno != ENOENT) {
    fail(describe_path(path));
  }
  // The temporary file goes beside it: the folder must exist and take it.
  std::error_code ec;
  fs::path parent = fs::absolute(path, ec).parent_path();
  if (parent.empty()) parent = "/";
  struct stat pst {};
  if (::stat(parent.c_str(), &pst) != 0 || !S_ISDIR(pst.st_mode)) {
    throw UsageError(rule.where + ": " + rule.flag + ": expected a file in an existing folder, got " +
                     describe_path(parent.string()) + " (" + parent.string() + ")");
  }
  // Whether the folder takes a file is asked of the folder's file system
  // too, not only of its permission bits (which say nothing to root): a
  // read-only mount, or a file system of the kernel's own (/proc, /sys) that
  // takes no file. The folder itself is left as it is (a file created and
  // removed there would change its modification time: a dataset's, say).
  if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    throw UsageError(rule.where + ": " + rule.flag + ": expected a file in a folder dbh may write, got an error (" +
                     std::strerror(errno) + ") (" + parent.string() + ")");
  }
  if (const std::string why = takes_no_files(parent.string()); !why.empty()) {
    throw UsageError(rule.where + ": " + rule.flag + ": expected a file in a folder dbh may write, got " + why +
                     " (" + parent.string() + ")");
  }
}

bool file_has_head_and_tail(const std::string& path, const std::string& head, const std::string& tail) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            static_cast<uintmax_t>(st.st_size) >= head.size() + tail.size();
  std::string got;
  ok = ok && read_at(fd, &got, head.size(), 0) && got == head;
  ok = ok && read_at(fd, &got, tail.size(), st.st_size - static_cast<off_t>(tail.size())) && got == tail;
  ::close(fd);
  return ok;
}

bool path_within(const std::string& path, const std::string& folder) {
  // Resolved, normal, without a trailing separator ("out/" is "out").
  const auto resolved = [](const std::string& s, std::error_code& ec) {
    fs::path p = fs::weakly_canonical(fs::absolute(s, ec), ec).lexically_normal();
    if (p.has_relative_path() && p.filename().empty()) p = p.parent_path();
    return p;
  };
  std::error_code ec;
  const fs::path p = resolved(path, ec);
  if (ec) return false;
  const fs::path f = resolved(folder, ec);
  if (ec) return false;
  const fs::path rel = p.lexically_relative(f);
  return !rel.empty() && *rel.begin() != "..";
}

namespace {

struct Identity {
  dev_t dev;
  ino_t ino;
  bool operator==(const Identity& o) const { return dev == o.dev && ino == o.ino; }
};

std::optional<Identity> identity_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return std::nullopt;
  return Identity{st.st_dev, st.st_ino};
}

// The folders a dataset's files really live in: the dataset folder, the
// targets of the links among its entries (images/ a link to another disk)
// and the folders of linked files (images/img_1.jpg -> /photos/1.jpg), in
// the dataset folder and the folders right below it (images/, icdar/).
// Whether an entry is a link comes with the listing, so a folder of
// 100,000 plain images costs no extra call.
std::vector<Identity> dataset_identities(const fs::path& data) {
  std::vector<Identity> out;
  const auto add = [&out](const fs::path& folder) {
    const auto id = identity_of(folder);
    if (id && std::find(out.begin(), out.end(), *id) == out.end()) out.push_back(*id);
  };
  add(data);
  const auto visit = [&](const fs::path& folder, bool descend, const auto& self) -> void {
    std::error_code ec;
    for (auto it = fs::directory_iterator(folder, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::directory_iterator(); it.increment(ec)) {
      std::error_code lec;
      const bool link = it->is_symlink(lec);
      if (link) {
        if (fs::is_directory(it->path(), lec)) {
          add(it->path());
        } else if (const fs::path target = fs::canonical(it->path(), lec); !lec) {
          add(target.parent_path());
        }
      }
      if (descend && !link && it->is_directory(lec)) self(it->path(), false, self);
    }
  };
  visit(data, true, visit);
  return out;
}

}  // namespace

bool within_by_identity(const std::string& path, const std::string& folder) {
  if (path.empty() || folder.empty()) return false;
  const auto roots = dataset_identities(folder);
  if (roots.empty()) return false;
  std::error_code ec;
  // The deepest existing ancestor of `path` and every folder above it, each
  // by device and inode: a link, a bind mount or "a/../a" cannot hide one.
  fs::path p = fs::absolute(path, ec).lexically_normal();
  if (ec) return false;
  while (!p.empty() && !fs::exists(fs::symlink_status(p, ec)) && p.has_relative_path()) p = p.parent_path();
  fs::path walk = fs::weakly_canonical(p, ec);
  if (ec) walk = p;
  for (;;) {
    if (const auto id = identity_of(walk)) {
      for (const auto& r : roots) {
        if (r == *id) return true;
      }
    }
    if (!walk.has_relative_path()) break;
    walk = walk.parent_path();
  }
  return false;
}

void check_outside_dataset(const std::string& where, const std::string& flag, const std::string& folder,
                           const std::string& data) {
  if (data.empty() || folder.empty() || !(path_within(folder, data) || within_by_identity(folder, data))) return;
  throw UsageError(where + ": " + flag + " " + one_line(folder) + ": expected a folder outside the dataset " +
                   one_line(data) + ", got one inside it (dbh never writes into your data)");
}

void check_outside_datasets(const std::string& where, const std::string& flag, const std::string& folder,
                            const std::vector<std::string>& datasets) {
  for (const auto& data : datasets) check_outside_dataset(where, flag, folder, data);
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

std::string default_output_folder(const std::string& label) {
  return (fs::path("reports") / "runs" /
          (safe_file_name(label) + "-" + timestamp_compact() + "-" + std::to_string(::getpid())))
      .string();
}

std::string default_probe_cache() {
  // One absolute place, never the working directory by accident.
  const std::string root = cache_root();
  if (!root.empty()) return (fs::path(root) / "probes").string();
  return fs::absolute(fs::path("reports") / "cache" / "probes").lexically_normal().string();
}

}  // namespace dbh::harness
