#include "harness/supervisor/shard.h"

#include <gtest/gtest.h>

#include <set>

#include "harness/common/error.h"

namespace dbh::harness {
namespace {

TEST(ShardTest, ParsesKOverN) {
  const Shard s = parse_shard("2/4");
  EXPECT_EQ(s.index, 2);
  EXPECT_EQ(s.count, 4);
  EXPECT_THROW(parse_shard("4/4"), ScenarioError);
  EXPECT_THROW(parse_shard("x/4"), ScenarioError);
  EXPECT_THROW(parse_shard("1"), ScenarioError);
}

TEST(ShardTest, DetectsSchedulersFromTheEnvironment) {
  auto slurm = detect_shard({{"SLURM_ARRAY_TASK_ID", "5"}, {"SLURM_ARRAY_TASK_COUNT", "4"},
                             {"SLURM_ARRAY_TASK_MIN", "3"}});
  ASSERT_TRUE(slurm);
  EXPECT_EQ(slurm->index, 2);
  EXPECT_EQ(slurm->count, 4);
  auto k8s = detect_shard({{"JOB_COMPLETION_INDEX", "1"}, {"DBH_SHARD_COUNT", "3"}});
  ASSERT_TRUE(k8s);
  EXPECT_EQ(k8s->index, 1);
  EXPECT_EQ(k8s->count, 3);
  EXPECT_EQ(detect_shard({{"JOB_COMPLETION_INDEX", "1"}}, 2)->count, 2);
  EXPECT_THROW(detect_shard({{"JOB_COMPLETION_INDEX", "1"}}), ScenarioError);
  auto gitlab = detect_shard({{"CI_NODE_INDEX", "1"}, {"CI_NODE_TOTAL", "2"}});  // 1-based
  ASSERT_TRUE(gitlab);
  EXPECT_EQ(gitlab->index, 0);
  EXPECT_EQ(detect_shard({{"GTEST_SHARD_INDEX", "1"}, {"GTEST_TOTAL_SHARDS", "2"}})->index, 1);
  EXPECT_EQ(detect_shard({{"TEST_SHARD_INDEX", "0"}, {"TEST_TOTAL_SHARDS", "3"}})->count, 3);
  EXPECT_FALSE(detect_shard({}));
  EXPECT_THROW(detect_shard({{"CI_NODE_INDEX", "3"}, {"CI_NODE_TOTAL", "2"}}), ScenarioError);
}

TEST(ShardTest, EveryScenarioInExactlyOneShardAndAddingOneMovesNoOther) {
  std::vector<std::string> ids;
  for (int i = 0; i < 200; ++i) ids.push_back("scenario-" + std::to_string(i));
  for (int64_t n : {1, 2, 3, 7}) {
    for (const auto& id : ids) {
      int hits = 0;
      for (int64_t k = 0; k < n; ++k) hits += in_shard(id, Shard{k, n, ""}) ? 1 : 0;
      EXPECT_EQ(hits, 1) << id;
    }
  }
  // Assignment depends on the id alone.
  std::set<int64_t> used;
  for (const auto& id : ids) {
    for (int64_t k = 0; k < 4; ++k) {
      if (in_shard(id, Shard{k, 4, ""})) used.insert(k);
    }
  }
  EXPECT_EQ(used.size(), 4u);
}

}  // namespace
}  // namespace dbh::harness
