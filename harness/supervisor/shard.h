#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace dbh::harness::supervisor {

/// Which part of a suite this process runs: index in [0, count).
struct Shard {
  int64_t index = 0;
  int64_t count = 1;
  std::string source;  // "--shard", "SLURM_ARRAY_TASK_ID", …
};

/// Parses "K/N" (K 0-based). Throws ScenarioError on anything else.
Shard parse_shard(const std::string& text);

/// Detects a shard from the environment, in this order: Slurm arrays
/// (SLURM_ARRAY_TASK_ID − SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT),
/// Kubernetes indexed Jobs (JOB_COMPLETION_INDEX with DBH_SHARD_COUNT, or
/// `k8s_count`), GitLab `parallel` (CI_NODE_INDEX/CI_NODE_TOTAL, 1-based),
/// GoogleTest (GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS) and Bazel
/// (TEST_SHARD_INDEX/TEST_TOTAL_SHARDS). `env` maps names to values. Throws
/// ScenarioError naming the variable when one of these that is set is not a
/// plain decimal integer ("abc", " 1", ""), or when the index lies outside
/// what the count allows (GitLab's as the 1-based value it was given).
std::optional<Shard> detect_shard(const std::map<std::string, std::string>& env, int64_t k8s_count = 0);
std::map<std::string, std::string> process_environment();

/// Stable assignment by a hash of the scenario id (FNV-1a 64, modulo the
/// shard count): adding a scenario never moves another one to a different
/// shard.
bool in_shard(const std::string& scenario_id, const Shard& shard);

}  // namespace dbh::harness::supervisor
