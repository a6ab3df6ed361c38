#include "harness/supervisor/shard.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "harness/common/error.h"

namespace dbh::harness {
namespace {

TEST(ShardTest, ParsesKOverN) {
  const supervisor::Shard s = supervisor::parse_shard("2/4");
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 4);
  EXPECT_THROW(supervisor::parse_shard("4/4"), ScenarioError);
  EXPECT_THROW(supervisor::parse_shard("x/4"), ScenarioError);
  EXPECT_THROW(supervisor::parse_shard("1"), ScenarioError);
}

TEST(ShardTest, DetectsSchedulersFromTheEnvironment) {
  auto slurm = supervisor::detect_shard({{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_COUNT", "4"},
                             {"SLURM_ARRAY_TASK_MIN", "3"}});
  ASSERT_TRUE(slurm);
  EXPECT_EQ(slurm->index, 2);
  EXPECT_EQ(slurm->count, 4);
  auto k8s = supervisor::detect_shard({{"JOB_COMPLETION_INDEX", "1"}, {"DBH_SHARD_COUNT", "3"}});
  ASSERT_TRUE(k8s);
  EXPECT_EQ(k8s->index, 1);
  EXPECT_EQ(k8s->count, 3);
  EXPECT_EQ(supervisor::detect_shard({{"JOB_COMPLETION_INDEX", "1"}}, 2)->count, 2);
  EXPECT_THROW(supervisor::detect_shard({{"JOB_COMPLETION_INDEX", "1"}}), ScenarioError);
  EXPECT_THROW(supervisor::detect_shard({{"SLURM_ARRAY_TASK_ID", "1"}}), ScenarioError);  // an index without its count
  auto gitlab = supervisor::detect_shard({{"CI_NODE_INDEX", "1"}, {"CI_NODE_TOTAL", "2"}});  // 1-based
  ASSERT_TRUE(gitlab);
  EXPECT_EQ(gitlab->index, 0);
  EXPECT_EQ(supervisor::detect_shard({{"GTEST_SHARD_INDEX", "1"}, {"GTEST_TOTAL_SHARDS", "2"}})->index, 1);
  EXPECT_EQ(supervisor::detect_shard({{"TEST_SHARD_INDEX", "0"}, {"TEST_TOTAL_SHARDS", "3"}})->count, 3);
  EXPECT_FALSE(supervisor::detect_shard({}));
  EXPECT_THROW(supervisor::detect_shard({{"CI_NODE_INDEX", "3"}, {"CI_NODE_TOTAL", "2"}}), ScenarioError);
  // --array=0-4:2: tasks 0, 2 and 4 are shards 0, 1 and 2 of 3.
  for (int64_t task = 0; task <= 4; task += 2) {
    auto stepped = supervisor::detect_shard({{"SLURM_ARRAY_TASK_ID", std::to_string(task)}, {"SLURM_ARRAY_TASK_COUNT", "3"},
                                 {"SLURM_ARRAY_TASK_MIN", "0"}, {"SLURM_ARRAY_TASK_STEP", "2"}});
    ASSERT_TRUE(stepped);
    EXPECT_EQ(stepped->index, task / 2);
    EXPECT_EQ(stepped->count, 3);
  }
  EXPECT_THROW(supervisor::detect_shard({{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "3"},
                             {"SLURM_ARRAY_TASK_STEP", "2"}}),
               ScenarioError);
  // A count without its index names no shard; more shards than --shard-count allows is refused.
  EXPECT_THROW(supervisor::detect_shard({{"DBH_SHARD_COUNT", "3"}}), ScenarioError);
  EXPECT_THROW(supervisor::parse_shard("0/1000001"), ScenarioError);
  EXPECT_EQ(supervisor::parse_shard("0/1000000").count, 1000000);
}

// A scheduler variable that is set but not a number stops the suite, naming
// the variable, instead of running every scenario in every job.
TEST(ShardTest, RefusesSchedulerVariablesThatAreNotNumbers) {
  const auto error = [](const std::map<std::string, std::string>& env) -> std::string {
    try {
      supervisor::detect_shard(env);
      return "";
    } catch (const ScenarioError& e) {
      return e.what();
    }
  };
  EXPECT_EQ(error({{"SLURM_ARRAY_TASK_ID", "abc"}, {"SLURM_ARRAY_TASK_COUNT", "2"}}),
            "SLURM_ARRAY_TASK_ID: expected a non-negative integer, got \"abc\"");
  EXPECT_EQ(error({{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", " 1"}}),
            "SLURM_ARRAY_TASK_COUNT: expected a non-negative integer, got \" 1\"");
  EXPECT_NE(error({{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "2"}, {"SLURM_ARRAY_TASK_MIN", "+1"}})
                .find("SLURM_ARRAY_TASK_MIN: expected"),
            std::string::npos);
  EXPECT_NE(error({{"SLURM_ARRAY_TASK_ID", ""}}).find("SLURM_ARRAY_TASK_ID: expected"), std::string::npos);
  EXPECT_NE(error({{"JOB_COMPLETION_INDEX", "1x"}, {"DBH_SHARD_COUNT", "2"}}).find("JOB_COMPLETION_INDEX: expected"),
            std::string::npos);
  EXPECT_NE(error({{"JOB_COMPLETION_INDEX", "1"}, {"DBH_SHARD_COUNT", "two"}}).find("DBH_SHARD_COUNT: expected"),
            std::string::npos);
  EXPECT_NE(error({{"CI_NODE_INDEX", "a"}, {"CI_NODE_TOTAL", "2"}}).find("CI_NODE_INDEX: expected a 1-based"),
            std::string::npos);
  EXPECT_NE(error({{"CI_NODE_INDEX", "1"}, {"CI_NODE_TOTAL", "2\n"}}).find("CI_NODE_TOTAL: expected"),
            std::string::npos);
  EXPECT_NE(error({{"GTEST_SHARD_INDEX", "0"}, {"GTEST_TOTAL_SHARDS", "x"}}).find("GTEST_TOTAL_SHARDS: expected"),
            std::string::npos);
  // Out of range: the value the user gave, in the scheduler's own numbering.
  EXPECT_EQ(error({{"CI_NODE_INDEX", "0"}, {"CI_NODE_TOTAL", "2"}}),
            "CI_NODE_INDEX: expected a 1-based job index in [1, 2] (CI_NODE_TOTAL 2), got 0");
  EXPECT_EQ(error({{"SLURM_ARRAY_TASK_ID", "9"}, {"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "3"}}),
            "SLURM_ARRAY_TASK_ID: expected a task id in [3, 7) (SLURM_ARRAY_TASK_MIN 3, SLURM_ARRAY_TASK_COUNT 4), "
            "got 9");
  // Valid values still shard; GitLab's last job is the last shard.
  const auto last = supervisor::detect_shard({{"CI_NODE_INDEX", "2"}, {"CI_NODE_TOTAL", "2"}});
  ASSERT_TRUE(last);
  EXPECT_EQ(last->index, 1);
}

TEST(ShardTest, EveryScenarioInExactlyOneShardAndAddingOneMovesNoOther) {
  std::vector<std::string> ids;
  for (int i = 0; i < 200; ++i) ids.push_back("scenario-" + std::to_string(i));
  for (int64_t n : {1, 2, 3, 7}) {
    for (const auto& id : ids) {
      int hits = 0;
      for (int64_t k = 0; k < n; ++k) hits += supervisor::in_shard(id, supervisor::Shard{k, n, ""}) ? 1 : 0;
      EXPECT_EQ(hits, 1) << id;
    }
  }
  // Assignment depends on the id alone.
  std::set<int64_t> used;
  for (const auto& id : ids) {
    for (int64_t k = 0; k < 4; ++k) {
      if (supervisor::in_shard(id, supervisor::Shard{k, 4, ""})) used.insert(k);
    }
  }
  EXPECT_EQ(used.size(), 4u);
}

}  // namespace
}  // namespace dbh::harness
