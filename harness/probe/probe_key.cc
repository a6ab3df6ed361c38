// The probe cache's key (the resolved scenario, the files a trial reads,
// the build, the machine), the cache's bound, and what counts as an
// infrastructure failure of a probe. Kept apart from the Prober so that
// torch-free tests can link it without the report writers.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness/probe/probe.h"
#include "harness/common/environment_vars.h"
#include "harness/common/files.h"
#include "harness/common/hash.h"
#include "harness/common/home.h"
#include "harness/common/text.h"
#include "harness/proto/event_types.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/machine.h"
#include "harness/supervisor/trial.h"

extern char** environ;

namespace dbh::harness::probe {
namespace fs = std::filesystem;

ProbeCounts count_probes(const std::vector<ProbeResult>& probes) {
  ProbeCounts c;
  for (const auto& p : probes) {
    c.fresh += p.cached ? 0 : 1;
    c.parallel += p.parallel ? 1 : 0;
    c.forked += p.analysis.forked && !p.cached ? 1 : 0;
  }
  return c;
}

bool failed_before_training(const supervisor::TrialAnalysis& a) {
  return supervisor::is_failure(a.outcome) && !a.failure.step && a.steps_completed == 0;
}

// ---------------------------------------------------------------------------
// The cache key: the resolved scenario, the files the trial reads, the build
// and the machine.

namespace {

struct Stamp {
  bool exists = false;
  int64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;  // changes on every write, even when mtime is put back
  uint64_t inode = 0;
  bool regular = false;
};

Stamp stamp_of(const std::string& path) {
  Stamp st;
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) return st;
  st.exists = true;
  st.regular = S_ISREG(sb.st_mode);
  st.size = static_cast<int64_t>(sb.st_size);
  st.mtime_ns = static_cast<int64_t>(sb.st_mtim.tv_sec) * 1000000000LL + sb.st_mtim.tv_nsec;
  st.ctime_ns = static_cast<int64_t>(sb.st_ctim.tv_sec) * 1000000000LL + sb.st_ctim.tv_nsec;
  st.inode = static_cast<uint64_t>(sb.st_ino);
  return st;
}

std::string stamp_text(const Stamp& st) {
  if (!st.exists) return "missing";
  return std::to_string(st.size) + " " + std::to_string(st.mtime_ns) + " " + std::to_string(st.ctime_ns) + " " +
         std::to_string(st.inode);
}

// Content digests of annotation files, by (path, size, mtime, ctime, inode):
// each version of a file is read once per process.
std::string content_digest(const std::string& path, const Stamp& st) {
  static std::mutex mu;
  static std::map<std::string, std::string> memo;
  const std::string id = path + "\n" + stamp_text(st);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (const auto it = memo.find(id); it != memo.end()) return it->second;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return "unreadable";
  Digest d;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    d.add_bytes(buf.data(), static_cast<size_t>(in.gcount()));
  }
  const std::string h = d.hex();
  std::lock_guard<std::mutex> lock(mu);
  memo[id] = h;
  return h;
}

bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::set<std::string> kImages = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff",
                                                ".webp", ".gif", ".pgm", ".ppm", ".pbm", ".jp2"};
  return kImages.count(ext) > 0;
}

// Annotation (and other non-image) files are fingerprinted by content too:
// an edit within the same second and size must still count. Larger files are
// taken by size and mtime_ns only.
constexpr int64_t kContentDigestMaxBytes = int64_t{256} << 20;

// The folders a walk has entered, by device and inode (following links):
// a folder reached again, through a link loop or a second link, is not.
class DirSet {
 public:
  /// Whether `path` is a folder not entered before (and now entered).
  bool enter(const std::string& path) {
    struct stat sb {};
    if (::stat(path.c_str(), &sb) != 0 || !S_ISDIR(sb.st_mode)) return false;
    return seen_.emplace(static_cast<uint64_t>(sb.st_dev), static_cast<uint64_t>(sb.st_ino)).second;
  }

 private:
  std::set<std::pair<uint64_t, uint64_t>> seen_;
};

void add_file(Digest& d, const std::string& label, const std::string& path) {
  d.add(label).add(path);
  const Stamp st = stamp_of(path);
  d.add(stamp_text(st));
}

void add_dataset(Digest& d, const std::string& root) {
  d.add("dataset").add(root);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    d.add(fs::exists(root, ec) ? "not a folder" : "missing");
    return;
  }
  std::vector<std::pair<std::string, std::string>> entries;  // relative path → fingerprint
  // Every file the loader can reach is in the key, however deep: a folder
  // is entered once (by device and inode), which is what ends a link loop.
  DirSet seen;
  seen.enter(root);
  fs::recursive_directory_iterator it(
      root, fs::directory_options::follow_directory_symlink | fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string path = it->path().string();
    if (std::error_code dir_ec; it->is_directory(dir_ec)) {
      if (!seen.enter(path)) it.disable_recursion_pending();
      continue;
    }
    const Stamp st = stamp_of(path);
    if (!st.regular) continue;
    std::string text = stamp_text(st);
    if (!is_image_file(it->path()) && st.size <= kContentDigestMaxBytes) text += " " + content_digest(path, st);
    entries.emplace_back(it->path().lexically_relative(root).string(), text);
  }
  if (ec) entries.emplace_back("(listing error)", ec.message());
  std::sort(entries.begin(), entries.end());
  for (const auto& [rel, text] : entries) d.add(rel).add(text);
}


// Note [The training's code is an input]: an external worker's outcome is
// decided by code dbh does not build, so all of it is in the key:
// - the program its argv starts, found as the spawn finds it (trial.cc): a
//   word with a slash from worker.cwd, a bare name through the worker's PATH
//   (`python` of another environment is another file);
// - every file or folder an argv word names, or the value of a `key=value`
//   or `--key=value` word (train.py, --config=run.yaml, a data folder);
// - the source trees they live in (worker.cwd and the folder of each named
//   file): every code or configuration file below them (the modules a script
//   imports, the configs Hydra composes), by name, size, times and inode.
//   Hidden folders, __pycache__ and dbh's own output and cache folders
//   (.dbh-owner, CACHEDIR.TAG) are not the training's code.
// Named files count by content too. A tree too large to list within the
// bounds below makes the probe uncacheable, never cached on part of its
// inputs.
constexpr size_t kMaxCodeFiles = 20000;
constexpr size_t kMaxTreeEntries = 200000;

bool is_code_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::set<std::string> kCode = {".py",  ".pyi",  ".pyx", ".pxd", ".so",  ".pth", ".yaml", ".yml",
                                              ".json", ".toml", ".cfg", ".ini", ".sh", ".jsonnet", ".env"};
  return kCode.count(ext) > 0;
}

bool is_dbh_folder(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / ".dbh-owner", ec) || fs::exists(dir / "CACHEDIR.TAG", ec);
}

// The program the spawn runs for `program` (find_program, with the PATH the
// worker gets), or "" when none is found.
std::string resolve_program(const std::string& program, const fs::path& cwd, const scenario::Scenario& s) {
  std::optional<std::string> path_var;
  if (const auto it = s.worker.env.find("PATH"); it != s.worker.env.end()) {
    path_var = it->second;
  } else if (const char* env = std::getenv("PATH")) {
    path_var = env;
  }
  const std::string found = find_program(program, path_var, cwd.string());
  return found.empty() || !stamp_of(found).regular ? "" : found;
}

// Adds every code file below `root` to `files` (path → stamp); false when
// the tree is larger than the bounds.
bool add_code_tree(const fs::path& root, DirSet* seen, std::map<std::string, std::string>* files, size_t* visited) {
  if (is_dbh_folder(root) || !seen->enter(root.string())) return true;
  std::error_code ec;
  fs::recursive_directory_iterator it(
      root, fs::directory_options::follow_directory_symlink | fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (++*visited > kMaxTreeEntries) return false;
    const fs::path p = it->path();
    if (std::error_code dir_ec; it->is_directory(dir_ec)) {
      const std::string name = p.filename().string();
      if (name.empty() || name[0] == '.' || name == "__pycache__" || is_dbh_folder(p) || !seen->enter(p.string())) {
        it.disable_recursion_pending();
      }
      continue;
    }
    if (!is_code_file(p) || p.filename().string().rfind('.', 0) == 0) continue;
    const Stamp st = stamp_of(p.string());
    if (!st.regular) continue;
    (*files)[p.string()] = stamp_text(st);
    if (files->size() > kMaxCodeFiles) return false;
  }
  return true;
}

void add_training_code(const scenario::Scenario& s, InputManifest* m) {
  const fs::path cwd = s.worker.cwd;  // load_scenario fills it in (the scenario file's folder by default)
  const auto by_content = [](const std::string& path, const Stamp& st) {
    return stamp_text(st) + (st.size <= kContentDigestMaxBytes ? " " + content_digest(path, st) : std::string());
  };
  const std::string program = s.worker.command.empty() ? "" : resolve_program(s.worker.command[0], cwd, s);
  if (!s.worker.command.empty()) {
    const Stamp st = stamp_of(program);
    m->entries.emplace_back("worker program " + s.worker.command[0] + " (" + (program.empty() ? "not found" : program) +
                                ")",
                            st.regular ? by_content(program, st) : stamp_text(st));
  }
  std::vector<fs::path> trees = {cwd};
  for (size_t i = 1; i < s.worker.command.size(); ++i) {
    const std::string& word = s.worker.command[i];
    std::vector<std::string> named = {word};
    if (const size_t eq = word.find('='); eq != std::string::npos) named.push_back(word.substr(eq + 1));
    for (const auto& n : named) {
      if (n.empty() || n.size() > 4096) continue;
      const fs::path p = fs::path(n).is_absolute() ? fs::path(n) : cwd / n;
      const Stamp st = stamp_of(p.string());
      if (st.regular) {
        m->entries.emplace_back("worker file " + p.string(), by_content(p.string(), st));
        trees.push_back(p.parent_path());
      } else if (std::error_code ec; fs::is_directory(p, ec)) {
        trees.push_back(p);
      }
    }
  }
  DirSet seen;
  std::map<std::string, std::string> files;
  size_t visited = 0;
  for (const auto& root : trees) {
    if (!add_code_tree(root, &seen, &files, &visited)) {
      m->not_cacheable = "the training's source tree below " + root.string() + " is larger than " +
                         std::to_string(kMaxCodeFiles) + " code files or " + std::to_string(kMaxTreeEntries) +
                         " entries, so not all of its code can be in the key";
      m->entries.emplace_back("worker code", "too large to list");
      return;
    }
  }
  for (const auto& [path, stamp] : files) m->entries.emplace_back("worker code " + path, stamp);
}

}  // namespace

std::string input_fingerprint(const scenario::Scenario& s) {
  Digest d;
  if (s.data.source == scenario::DataSource::kReal && !s.data.path.empty()) add_dataset(d, s.data.path);
  if (!s.data.val.path.empty()) {
    d.add("validation");
    add_dataset(d, s.data.val.path);
  }
  if (!s.model.weights.empty()) add_file(d, DBH_SCENARIO_KEY(model.weights), s.model.weights);
  if (!s.train.resume_from.empty()) add_file(d, DBH_SCENARIO_KEY(train.resume_from), s.train.resume_from);
  return d.hex();
}

std::string build_identity() {
  static const std::string identity = [] {
    Digest d;
    // The running binary's own inode (through /proc/self/exe, which stays
    // valid when the file was replaced by a rebuild meanwhile).
    d.add("exe").add(self_exe()).add(stamp_text(stamp_of("/proc/self/exe")));
    // Every shared library the process mapped: LibTorch, CUDA, cuDNN,
    // OpenCV as this binary found them.
    for (const auto& lib : supervisor::mapped_libraries()) add_file(d, "lib", lib);
    return d.hex();
  }();
  return identity;
}

std::string InputManifest::hash() const {
  Digest d;
  d.add("dbh input manifest 1");
  for (const auto& [what, fingerprint] : entries) d.add(what).add(fingerprint);
  return d.hex();
}

InputManifest input_manifest(const scenario::Scenario& s) {
  InputManifest m;
  const auto digest_of = [](const std::string& text) {
    Digest d;
    d.add(text);
    return d.hex();
  };
  m.entries.emplace_back("scenario (resolved, includes merged)", digest_of(scenario::resolved_json(s)));
  m.entries.emplace_back("files: datasets, weights, checkpoint", input_fingerprint(s));
  {
    const std::string kb = (fs::path(dbh_home()) / "reports" / "kb" / "failures.yaml").string();
    const Stamp st = stamp_of(kb);
    m.entries.emplace_back("knowledge base " + kb,
                           st.regular ? stamp_text(st) + " " + content_digest(kb, st) : stamp_text(st));
  }
  if (s.worker.external()) add_training_code(s, &m);
  for (const auto& [name, value] : outcome_environment()) m.entries.emplace_back("env " + name, value);
  m.entries.emplace_back("build", build_identity());
  m.entries.emplace_back("machine", supervisor::machine_identity());
  return m;
}

std::string probe_key(const InputManifest& inputs, const std::string& environment) {
  Digest d;
  d.add("dbh probe cache key 4").add(inputs.hash()).add(environment);
  return d.hex();
}

std::string probe_key(const scenario::Scenario& s, const std::string& environment) {
  return probe_key(input_manifest(s), environment);
}

namespace {

// Whether `name` is a probe cache entry's file name: its 32-hex-digit key,
// "-metrics" for a probe judged by metrics, ".json". Only those are ever
// trimmed: --cache may name a folder holding files of the user's own.
bool is_probe_cache_entry(const std::string& name) {
  std::string stem = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0
                         ? name.substr(0, name.size() - 5)
                         : std::string();
  if (stem.size() > 8 && stem.compare(stem.size() - 8, 8, "-metrics") == 0) stem.resize(stem.size() - 8);
  return stem.size() == 32 && std::all_of(stem.begin(), stem.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

namespace {

// A result dbh stored (Prober::store): a JSON object whose "key" is the
// file's own stem. Anything else under a cache-like name is the user's, and
// never removed.
bool is_stored_probe_result(const fs::path& path, int64_t size) {
  if (size <= 0 || size > (int64_t{1} << 20)) return false;
  const auto text = read_regular_file(path.string(), size_t{1} << 20);
  if (!text) return false;
  const auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("key") && j["key"].is_string() && j.contains("scenario_hash") &&
         j["key"].get<std::string>() == path.stem().string();
}

}  // namespace

int64_t trim_probe_cache(const std::string& cache_dir, int64_t cap_bytes) {
  struct Entry {
    fs::file_time_type mtime;
    int64_t size;
    fs::path path;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache_dir, ec)) {
    std::error_code ec2;
    if (!is_probe_cache_entry(e.path().filename().string()) || !e.is_regular_file(ec2) || e.is_symlink(ec2)) continue;
    const auto size = static_cast<int64_t>(e.file_size(ec2));
    const auto mtime = e.last_write_time(ec2);
    if (ec2 || !is_stored_probe_result(e.path(), size)) continue;
    entries.push_back({mtime, size, e.path()});
    total += size;
  }
  if (total <= cap_bytes) return 0;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.mtime < b.mtime; });
  int64_t removed = 0;
  for (const auto& e : entries) {
    if (total <= cap_bytes) break;
    std::error_code ec2;
    if (fs::remove(e.path, ec2)) {
      total -= e.size;
      ++removed;
    }
  }
  return removed;
}

namespace {

// What a worker writes when the disk or its quota is full.
constexpr const char* kDiskFullMarkers[] = {"No space left on device", "Disk quota exceeded", "ENOSPC", "EDQUOT",
                                            "PytorchStreamWriter failed writing"};

std::string excerpt_around(const std::string& text, const std::string& what) {
  const auto at = text.find(what);
  if (at == std::string::npos) return one_line(text.substr(0, 200));
  const size_t from = text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
  const size_t to = std::min(text.find('\n', at), from + 300);
  return one_line(text.substr(from, to - from));
}

}  // namespace

std::string infrastructure_failure(const supervisor::TrialResult& r, const supervisor::TrialAnalysis& a) {
  if (!r.spawn_error.empty()) return "expected a worker process, got: " + r.spawn_error;
  if (r.interrupted) return "the harness stopped the worker before it finished";
  if (!r.journal_error.empty()) return r.journal_error;
  // The worker's errors (the failure and its secondary messages) and warnings.
  std::vector<std::string> texts = {r.stderr_tail, a.failure.message};
  texts.insert(texts.end(), a.failure.secondary.begin(), a.failure.secondary.end());
  texts.insert(texts.end(), a.warnings.begin(), a.warnings.end());
  return disk_full_evidence(texts);
}

std::string disk_full_evidence(const std::vector<std::string>& texts) {
  for (const auto& text : texts) {
    for (const char* marker : kDiskFullMarkers) {
      if (text.find(marker) != std::string::npos) {
        return "expected a trial the disk could hold, got a full disk (\"" + excerpt_around(text, marker) +
               "\"); free some space and run again";
      }
    }
  }
  return "";
}

}  // namespace dbh::harness::probe
