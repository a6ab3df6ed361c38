#include "harness/supervisor/shard.h"

#include <charconv>

#include "harness/common/error.h"
#include "harness/common/hash.h"

extern char** environ;

namespace dbh::harness {

namespace {
bool to_int(const std::string& s, int64_t* v) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

Shard checked(int64_t index, int64_t count, const std::string& source) {
  if (count < 1 || index < 0 || index >= count) {
    throw ScenarioError(source + ": expected a shard index in [0, " + std::to_string(count) + "), got " +
                        std::to_string(index) + " of " + std::to_string(count));
  }
  return Shard{index, count, source};
}
}  // namespace

Shard parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  int64_t k = 0, n = 0;
  if (slash == std::string::npos || !to_int(text.substr(0, slash), &k) || !to_int(text.substr(slash + 1), &n)) {
    throw ScenarioError("--shard: expected K/N with 0 <= K < N, got \"" + text + "\"");
  }
  return checked(k, n, "--shard " + text);
}

std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

std::optional<Shard> detect_shard(const std::map<std::string, std::string>& env, int64_t k8s_count) {
  auto get = [&](const char* key, int64_t* v) {
    const auto it = env.find(key);
    return it != env.end() && to_int(it->second, v);
  };
  int64_t index = 0, count = 0, min = 0;
  if (get("SLURM_ARRAY_TASK_ID", &index) && get("SLURM_ARRAY_TASK_COUNT", &count)) {
    if (!get("SLURM_ARRAY_TASK_MIN", &min)) min = 0;
    return checked(index - min, count, "SLURM_ARRAY_TASK_ID");
  }
  if (get("JOB_COMPLETION_INDEX", &index)) {
    if (k8s_count > 0 || get("DBH_SHARD_COUNT", &count)) {
      return checked(index, k8s_count > 0 ? k8s_count : count, "JOB_COMPLETION_INDEX");
    }
    throw ScenarioError("JOB_COMPLETION_INDEX is set: expected the shard count in DBH_SHARD_COUNT or --shard-count");
  }
  if (get("CI_NODE_INDEX", &index) && get("CI_NODE_TOTAL", &count)) {
    return checked(index - 1, count, "CI_NODE_INDEX");
  }
  if (get("GTEST_SHARD_INDEX", &index) && get("GTEST_TOTAL_SHARDS", &count)) {
    return checked(index, count, "GTEST_SHARD_INDEX");
  }
  if (get("TEST_SHARD_INDEX", &index) && get("TEST_TOTAL_SHARDS", &count)) {
    return checked(index, count, "TEST_SHARD_INDEX");
  }
  return std::nullopt;
}

bool in_shard(const std::string& id, const Shard& shard) {
  return static_cast<int64_t>(fnv1a64(id) % static_cast<uint64_t>(shard.count)) == shard.index;
}

}  // namespace dbh::harness
