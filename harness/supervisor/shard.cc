#include "harness/supervisor/shard.h"

#include <algorithm>
#include <charconv>
#include <utility>

#include "harness/common/error.h"
#include "harness/common/hash.h"
#include "harness/common/text.h"

extern char** environ;

namespace dbh::harness::supervisor {

namespace {
bool to_int(const std::string& s, int64_t* v) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// As --shard-count's own bound: more shards than that is a typo, never a split.
constexpr int64_t kMaxShardCount = 1'000'000;

Shard checked(int64_t index, int64_t count, const std::string& source) {
  if (count > kMaxShardCount) {
    throw ScenarioError(source + ": expected at most " + std::to_string(kMaxShardCount) + " shards, got " +
                        std::to_string(count));
  }
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
  // A variable that is set must hold a plain decimal integer ("abc", " 1",
  // "+1" and "" are refused, never read as unset): a scheduler that sets it
  // means this process to run a part of the suite, and running all of it
  // instead would be silently wrong.
  const auto value = [&](const char* key, const char* what = "a non-negative integer") -> std::optional<int64_t> {
    const auto it = env.find(key);
    if (it == env.end()) return std::nullopt;
    int64_t v = 0;
    if (!to_int(it->second, &v)) {
      throw ScenarioError(std::string(key) + ": expected " + what + ", got \"" + one_line(it->second) + "\"");
    }
    return v;
  };
  // Each scheduler's variables are all read (so each is checked) before any
  // is used. A lone index without its count is not a shard, as before.
  const auto slurm_id = value("SLURM_ARRAY_TASK_ID");
  const auto slurm_count = value("SLURM_ARRAY_TASK_COUNT");
  const auto slurm_min = value("SLURM_ARRAY_TASK_MIN");
  const auto slurm_step = value("SLURM_ARRAY_TASK_STEP");
  if (slurm_id && !slurm_count) {
    // As a Kubernetes index without its count: a part of the suite was meant.
    throw ScenarioError("SLURM_ARRAY_TASK_ID is set: expected SLURM_ARRAY_TASK_COUNT too (the array's size)");
  }
  if (slurm_id && slurm_count) {
    // --array=0-4:2 runs tasks 0, 2 and 4: three shards, numbered by step.
    // Slurm's task ids are below a few million: bounded, the arithmetic
    // below cannot overflow.
    constexpr int64_t kMaxTaskValue = int64_t{1} << 30;
    for (const auto& [name, v] : {std::pair<const char*, std::optional<int64_t>>{"SLURM_ARRAY_TASK_ID", slurm_id},
                                  {"SLURM_ARRAY_TASK_COUNT", slurm_count},
                                  {"SLURM_ARRAY_TASK_MIN", slurm_min},
                                  {"SLURM_ARRAY_TASK_STEP", slurm_step}}) {
      if (v && (*v < 0 || *v > kMaxTaskValue)) {
        throw ScenarioError(std::string(name) + ": expected an integer in [0, " + std::to_string(kMaxTaskValue) +
                            "], got " + std::to_string(*v));
      }
    }
    const int64_t min = slurm_min.value_or(0);
    const int64_t step = slurm_step.value_or(1);
    const int64_t offset = *slurm_id - min;
    if (*slurm_count < 1 || step < 1 || offset < 0 || offset % step != 0 || offset / step >= *slurm_count) {
      throw ScenarioError(
          "SLURM_ARRAY_TASK_ID: expected a task id in [" + std::to_string(min) + ", " +
          std::to_string(min + *slurm_count * std::max<int64_t>(step, 1)) + ")" +
          (step != 1 ? " in steps of " + std::to_string(step) : std::string()) + " (SLURM_ARRAY_TASK_MIN " +
          std::to_string(min) + ", SLURM_ARRAY_TASK_COUNT " + std::to_string(*slurm_count) +
          (slurm_step ? ", SLURM_ARRAY_TASK_STEP " + std::to_string(step) : std::string()) + "), got " +
          std::to_string(*slurm_id));
    }
    return checked((*slurm_id - min) / step, *slurm_count, "SLURM_ARRAY_TASK_ID");
  }
  const auto k8s_index = value("JOB_COMPLETION_INDEX");
  const auto k8s_env_count = value("DBH_SHARD_COUNT");
  if (k8s_index) {
    if (k8s_count > 0 || k8s_env_count) {
      return checked(*k8s_index, k8s_count > 0 ? k8s_count : *k8s_env_count, "JOB_COMPLETION_INDEX");
    }
    throw ScenarioError("JOB_COMPLETION_INDEX is set: expected the shard count in DBH_SHARD_COUNT or --shard-count");
  }
  if (k8s_env_count) {
    // A count without the index names no shard: the whole suite was not meant.
    throw ScenarioError("DBH_SHARD_COUNT is set: expected JOB_COMPLETION_INDEX too (a Kubernetes indexed Job's "
                        "index), got it unset");
  }
  const auto node_index = value("CI_NODE_INDEX", "a 1-based job index (a positive integer)");
  const auto node_total = value("CI_NODE_TOTAL");
  if (node_index && node_total) {
    // GitLab's `parallel` numbers its jobs from 1.
    if (*node_total < 1 || *node_index < 1 || *node_index > *node_total) {
      throw ScenarioError("CI_NODE_INDEX: expected a 1-based job index in [1, " + std::to_string(*node_total) +
                          "] (CI_NODE_TOTAL " + std::to_string(*node_total) + "), got " +
                          std::to_string(*node_index));
    }
    return checked(*node_index - 1, *node_total, "CI_NODE_INDEX");
  }
  const auto gtest_index = value("GTEST_SHARD_INDEX");
  const auto gtest_total = value("GTEST_TOTAL_SHARDS");
  if (gtest_index && gtest_total) return checked(*gtest_index, *gtest_total, "GTEST_SHARD_INDEX");
  const auto bazel_index = value("TEST_SHARD_INDEX");
  const auto bazel_total = value("TEST_TOTAL_SHARDS");
  if (bazel_index && bazel_total) return checked(*bazel_index, *bazel_total, "TEST_SHARD_INDEX");
  return std::nullopt;
}

bool in_shard(const std::string& id, const Shard& shard) {
  return static_cast<int64_t>(fnv1a64(id) % static_cast<uint64_t>(shard.count)) == shard.index;
}

}  // namespace dbh::harness::supervisor
