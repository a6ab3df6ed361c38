#include "harness/supervisor/tuning_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <utility>
#include <vector>

#include "harness/common/cpu.h"
#include "harness/common/environment_vars.h"
#include "harness/common/hash.h"
#include "harness/step_code.h"
#include "harness/supervisor/machine.h"
#include "harness/supervisor/trial.h"
#include "harness/supervisor/tuning.h"

namespace dbh::harness::supervisor::internal {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// At most this many measurements are kept; the oldest go first.
constexpr size_t kMaxCacheEntries = 256;
// The largest thread count a cache entry may name (train.threads' bound).
constexpr int64_t kMaxThreads = 1024;

// Whether `name` is one of this cache's own files: <32 hex digits>.json or
// .lock, or a temporary file of write_file_atomically for one.
bool own_cache_file(const std::string& name) {
  if (name.size() < 37) return false;
  for (size_t i = 0; i < 32; ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  const std::string rest = name.substr(32);
  return rest == ".json" || rest == ".lock" || rest.rfind(".json.tmp", 0) == 0;
}

}  // namespace

std::string tuning_key(const scenario::Scenario& s) {
  Digest d;
  d.add("dbh measured choices 1")
      .add(machine_identity())
      .add(libraries_identity())
      .add(kStepCodeDigest)  // the code a step runs, not dbh's version
      .add([] {  // threads, kernels and libraries the variables choose
        std::string vars;
        for (const auto& [name, value] : outcome_environment())
          vars += name + "=" + value + "\n";
        return vars;
      }())
      .add(s.hardware.device)
      .add(std::to_string(s.model.encoder))
      .add(model::to_string(s.model.decoder))
      .add(std::to_string(s.model.k))
      .add(std::to_string(s.data.size))
      .add(std::to_string(s.data.batch_size))
      .add(model::to_string(s.train.precision))
      .add(model::to_string(s.train.optimizer))
      .add(s.train.channels_last ? (*s.train.channels_last ? "cl" : "nchw") : "auto")
      .add(std::to_string(s.train.threads))
      // What else the measuring worker sets: the cores it may use, cuDNN.
      .add(std::to_string(available_cores()))
      .add(std::string(s.hardware.cudnn_enabled ? "1" : "0") + (s.hardware.cudnn_benchmark ? "1" : "0") +
           (s.hardware.cudnn_deterministic ? "1" : "0") + (s.hardware.allow_tf32 ? "1" : "0"));
  return d.hex();
}

FileLock::FileLock(const std::string& path)
    : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644)) {
  if (fd_ < 0) return;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) return;
    if (stop_requested() != 0) {
      interrupted_ = true;
      return;
    }
    ::usleep(50 * 1000);
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

json read_cached(const fs::path& file, int64_t cores, bool default_channels_last, int64_t default_threads) {
  constexpr off_t kMaxEntryBytes = 1 << 20;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return nullptr;
  struct stat sb {};
  std::string text;
  if (::fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size <= kMaxEntryBytes) {
    text.resize(static_cast<size_t>(sb.st_size));
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::read(fd, &text[got], text.size() - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    text.resize(got);
  }
  ::close(fd);
  json j = json::parse(text, nullptr, false);
  // Note [A measurement's budget]: a verdict that measuring costs too much.
  if (j.is_object() && j.contains("over_budget_step_seconds")) {
    auto number_in = [&](const char* key, double lo, double hi) {
      return j.contains(key) && j[key].is_number() && j[key].get<double>() >= lo && j[key].get<double>() < hi;
    };
    if (!number_in("over_budget_step_seconds", kMinStepSeconds, 1e6) || !number_in("least_seconds", 0, 1e9) ||
        !number_in("budget_seconds", 0, 1e9) || !j.contains("cores") || !j["cores"].is_number_integer() ||
        j["cores"].get<int64_t>() != cores || !j.contains("measured_at") || !j["measured_at"].is_string() ||
        (j.contains("size") && !j["size"].is_number_integer()) ||
        (j.contains("batch") && !j["batch"].is_number_integer()) ||
        (j.contains("probe_size") && !j["probe_size"].is_number_integer())) {
      return nullptr;
    }
    return j;
  }
  if (!j.is_object() || !j.contains("candidates") || !j["candidates"].is_array() || !j.contains("choice") ||
      !j["choice"].is_number_integer()) {
    return nullptr;
  }
  const auto& candidates = j["candidates"];
  const int64_t choice = j["choice"].get<int64_t>();
  if (choice < 0 || choice >= static_cast<int64_t>(candidates.size())) return nullptr;
  for (const auto& c : candidates) {
    if (!c.is_object() || !c.contains("channels_last") || !c["channels_last"].is_boolean() || !c.contains("threads") ||
        !c["threads"].is_number_integer() || c["threads"].get<int64_t>() < 1 ||
        c["threads"].get<int64_t>() > std::min<int64_t>(kMaxThreads, cores) || !c.contains("seconds") ||
        !c["seconds"].is_array()) {
      return nullptr;
    }
    for (const auto& v : c["seconds"]) {
      if (!v.is_number() || !(v.get<double>() >= kMinStepSeconds) || !(v.get<double>() < 1e6)) return nullptr;
    }
  }
  if (!j.contains("cores") || !j["cores"].is_number_integer() || j["cores"].get<int64_t>() != cores) return nullptr;
  if (choose_candidate(candidates, default_channels_last, default_threads) != choice) return nullptr;
  // The fields a report reads, each of its type when present.
  auto typed = [&](const char* key, bool (json::*is)() const noexcept) { return !j.contains(key) || (j[key].*is)(); };
  if (!typed("others_cores", &json::is_number) ||
      !typed("measure_seconds", &json::is_number) || !typed("measured_at", &json::is_string) ||
      !typed("size", &json::is_number_integer) || !typed("batch", &json::is_number_integer) ||
      !typed("cores", &json::is_number_integer)) {
    return nullptr;
  }
  return j;
}

void trim_cache(const fs::path& dir) {
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code ec2;
    if (own_cache_file(e.path().filename().string()) && e.is_regular_file(ec2) && !e.is_symlink(ec2)) {
      files.push_back({e.last_write_time(ec2), e.path()});
    }
  }
  if (files.size() <= 2 * kMaxCacheEntries) return;
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i + 2 * kMaxCacheEntries < files.size(); ++i) fs::remove(files[i].second, ec);
}

}  // namespace dbh::harness::supervisor::internal
