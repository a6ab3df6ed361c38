// The bad-input catalogue (tests/bad_input/): every entry exits with its
// recorded code and message, through the real binary, and leaves nothing
// half-written behind.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(DBH_SOURCE_DIR) / "tests" / "bad_input";

std::vector<nlohmann::json> cases() {
  std::ifstream in(kDir / "cases.json");
  const auto j = nlohmann::json::parse(in);
  return std::vector<nlohmann::json>(j.begin(), j.end());
}

class BadInputTest : public ::testing::TestWithParam<nlohmann::json> {};

// A full disk: a tmpfs of `kb` KiB mounted for the duration of a case.
class SmallDisk {
 public:
  explicit SmallDisk(fs::path dir) : dir_(std::move(dir)) {}
  ~SmallDisk() {
    if (mounted_) testing::run_process({"/bin/umount", dir_.string()}, "", 30);
    fs::remove_all(dir_);
  }
  // Empty when mounted, else why not.
  std::string mount(int kb) {
    fs::create_directories(dir_);
    const auto r = testing::run_process(
        {"/bin/mount", "-t", "tmpfs", "-o", "size=" + std::to_string(kb) + "k", "dbh-full-disk", dir_.string()}, "", 30);
    mounted_ = r.exit_code == 0;
    return mounted_ ? "" : "cannot mount a " + std::to_string(kb) + " KiB tmpfs (needs root): " + r.err;
  }

 private:
  fs::path dir_;
  bool mounted_ = false;
};

// Replaces "$T" (the case's sandbox folder), "$SRC" (the source tree) and a
// leading "@" (a file of the catalogue) in an argument or a setup path.
// "$BYTE{ff}" becomes the raw byte 0xff (names that are not UTF-8, which a
// JSON catalogue cannot hold as they are).
std::string expand(std::string s, const fs::path& sandbox) {
  if (!s.empty() && s[0] == '@') return (kDir / s.substr(1)).lexically_normal().string();
  for (size_t at = s.find("$BYTE{"); at != std::string::npos && at + 8 < s.size() + 1; at = s.find("$BYTE{", at + 1)) {
    const char byte = static_cast<char>(std::stoi(s.substr(at + 6, 2), nullptr, 16));
    s.replace(at, 9, std::string(1, byte));
  }
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"$T", sandbox.string()},
                                   std::pair<std::string, std::string>{"$SRC", DBH_SOURCE_DIR}}) {
    for (size_t at = s.find(key); at != std::string::npos; at = s.find(key, at + value.size())) {
      s.replace(at, key.size(), value);
    }
  }
  return s;
}

// Read-only file systems mounted for a case (tmpfs, root only), unmounted
// when it ends.
struct ReadOnlyMounts {
  std::vector<fs::path> at;
  ~ReadOnlyMounts() {
    for (const auto& p : at) testing::run_process({"/bin/umount", p.string()}, "", 30);
  }
};

// Builds what a case needs in its sandbox: files, folders, links, FIFOs,
// copies of fixtures, removed entries, truncated files, read-only folders. Paths are
// relative to the sandbox.
void set_up(const nlohmann::json& steps, const fs::path& t, ReadOnlyMounts* mounts) {
  for (const auto& step : steps) {
    auto at = [&](const char* key) {
      const std::string p = expand(step.at(key).get<std::string>(), t);
      return fs::path(p).is_absolute() ? fs::path(p) : t / p;
    };
    if (step.contains("write")) {
      const fs::path p = at("write");
      fs::create_directories(p.parent_path());
      std::ofstream out(p, std::ios::binary);
      out << expand(step.value("text", ""), t);
      for (int64_t i = 0; i < step.value("pad", int64_t{0}); ++i) out << step.value("pad_text", std::string("#"));
    } else if (step.contains("mkdir")) {
      fs::create_directories(at("mkdir"));
    } else if (step.contains("symlink")) {
      fs::create_directories(at("at").parent_path());
      fs::create_symlink(expand(step.at("symlink").get<std::string>(), t), at("at"));
    } else if (step.contains("fifo")) {
      ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0644), 0) << at("fifo");
    } else if (step.contains("copy")) {
      fs::create_directories(at("to").parent_path());
      fs::copy(at("copy"), at("to"), fs::copy_options::recursive);
    } else if (step.contains("readonly")) {
      const fs::path p = at("readonly");
      fs::create_directories(p);
      const auto r = testing::run_process({"/bin/mount", "-t", "tmpfs", "-o", "ro,size=64k", "dbh-read-only", p.string()},
                                          "", 30);
      if (r.exit_code != 0) GTEST_SKIP() << "cannot mount a read-only tmpfs (needs root): " << r.err;
      mounts->at.push_back(p);
    } else if (step.contains("remove")) {
      fs::remove_all(at("remove"));
    } else if (step.contains("truncate")) {
      fs::resize_file(at("truncate"), step.at("bytes").get<uintmax_t>());
    } else {
      FAIL() << "unknown setup step " << step.dump();
    }
  }
}

// Every file and folder under `root` with its size and modification time,
// except those under the skipped relative paths.
std::map<std::string, std::string> snapshot(const fs::path& root, const std::vector<std::string>& skip) {
  std::map<std::string, std::string> out;
  if (!fs::exists(root)) return out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string rel = it->path().lexically_relative(root).string();
    if (std::any_of(skip.begin(), skip.end(), [&](const std::string& s) { return rel.rfind(s, 0) == 0; })) {
      it.disable_recursion_pending();
      continue;
    }
    struct stat st {};
    ::lstat(it->path().c_str(), &st);
    out[rel] = std::to_string(st.st_mode) + ":" + std::to_string(st.st_size) + ":" +
               std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    if (S_ISLNK(st.st_mode)) it.disable_recursion_pending();
  }
  return out;
}

TEST_P(BadInputTest, ExitsWithItsRecordedCodeAndMessage) {
  const auto& c = GetParam();
  const std::string name = c["name"].get<std::string>();
  if (c.value("needs_root", false) && ::geteuid() != 0) GTEST_SKIP() << "needs root";
  if (c.value("needs_non_root", false) && ::geteuid() == 0) GTEST_SKIP() << "root ignores file permissions";
  // Each case runs in its own sandbox, which is also its working directory:
  // whatever dbh writes by mistake (a default output folder, a lock) shows.
  std::string templ = (fs::path(::testing::TempDir()) / ("dbh-bad-" + name + "-XXXXXX")).string();
  ASSERT_NE(::mkdtemp(templ.data()), nullptr) << templ;
  const fs::path sandbox = templ;
  struct Remove {
    fs::path p;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } remove_sandbox{sandbox};
  fs::path out = sandbox / "out";
  std::optional<SmallDisk> disk;
  if (c.contains("full_disk_kb")) {
    disk.emplace(sandbox / "disk");
    if (const auto why = disk->mount(c["full_disk_kb"].get<int>()); !why.empty()) GTEST_SKIP() << why;
    out = sandbox / "disk" / "out";
  }
  ReadOnlyMounts mounts;  // unmounted before the sandbox is removed
  if (c.contains("setup")) set_up(c["setup"], sandbox, &mounts);
  if (::testing::Test::HasFatalFailure() || ::testing::Test::IsSkipped()) return;
  // What the case may change: only its output folder.
  std::vector<std::string> may_change = {"out", "disk"};
  for (const auto& m : c.value("may_change", std::vector<std::string>{})) may_change.push_back(m);
  const auto before = snapshot(sandbox, may_change);
  std::vector<std::string> args = {DBH_BINARY};
  bool has_out = false;
  for (const auto& a : c["args"]) {
    const std::string s = expand(a.get<std::string>(), sandbox);
    has_out = has_out || s == "--out";
    args.push_back(s);
  }
  const std::string cmd = args.size() > 1 ? args[1] : "";
  if (!has_out && (cmd == "run" || cmd == "suite" || cmd == "repeat")) {
    args.push_back("--out");
    args.push_back(out.string());
  }
  // Variables a case sets for dbh ("env": {"DBH_CACHE_DIR": "$T/ds"}).
  testing::EnvChanges env;
  const nlohmann::json variables = c.value("env", nlohmann::json::object());
  for (const auto& [name, value] : variables.items()) {
    env[name] = expand(value.get<std::string>(), sandbox);
  }
  const auto r = testing::run_process_with_env(args, env, sandbox.string(), 120);
  EXPECT_FALSE(r.timed_out) << "dbh did not finish (hung on its input?)";
  EXPECT_EQ(r.exit_code, c["exit"].get<int>()) << r.out << r.err;
  const std::string message = expand(c["message"].get<std::string>(), sandbox);
  EXPECT_NE((r.err + r.out).find(message), std::string::npos) << "expected: " << message << "\ngot: " << r.err << r.out;
  // Nothing left behind: no process, no lock, no change outside the output.
  EXPECT_EQ(testing::find_processes({sandbox.string()}), std::vector<pid_t>{}) << "a process outlived dbh";
  EXPECT_EQ(snapshot(sandbox, may_change), before) << "dbh changed files outside its output folder";
  for (const auto& e : fs::recursive_directory_iterator(sandbox)) {
    EXPECT_NE(e.path().filename(), ".dbh.lock") << "lock left behind: " << e.path();
  }
  if (c.contains("full_disk_kb") && fs::exists(out)) {
    // A suite keeps its journal (complete, fsync'd lines) and nothing else.
    for (const auto& e : fs::recursive_directory_iterator(out)) {
      // dbh's own bookkeeping, each written whole or not at all.
      if (e.is_directory() || e.path().filename() == ".dbh-owner" || e.path().filename() == ".dbh-made") continue;
      ASSERT_EQ(e.path().filename(), "journal.jsonl") << "half-written file left: " << e.path();
      std::ifstream in(e.path());
      std::string line;
      while (std::getline(in, line)) {
        EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << e.path() << ": " << line;
      }
    }
  } else if (!c.value("keeps_out", false)) {
    EXPECT_FALSE(fs::exists(out)) << "something was written to " << out;
  }
}

INSTANTIATE_TEST_SUITE_P(Catalogue, BadInputTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<nlohmann::json>& info) {
                           return info.param["name"].get<std::string>();
                         });

TEST(BadInputCatalogueTest, CoversTheListedKinds) { EXPECT_GE(cases().size(), 85u); }

}  // namespace
}  // namespace dbh
