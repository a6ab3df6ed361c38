#include "harness/common/hash.h"

#include <gtest/gtest.h>

#include <string>

#include "harness/supervisor/shard.h"

namespace dbh::harness {
namespace {

// Expected values computed with the hand-written hashes dbh had before
// harness/common/hash.h (shard.cc, scenario.cc, run_command.cc, worker.cc):
// they are persisted (scenario hashes, shard assignment, suite ids), so they
// must never change. Note [dbh's FNV offset basis] says why "" is not the
// standard cbf29ce484222325.
TEST(HashTest, KnownVectors) {
  EXPECT_EQ(fnv1a64(""), 0x14650fb0739d0383ULL);
  EXPECT_EQ(fnv1a64("a"), 0x44bd8ad473cd9906ULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x88fad7c0a8ff07f2ULL);
  EXPECT_EQ(fnv1a64("scenarios/ci-smoke.yaml"), 0x5f0494618425f580ULL);
  EXPECT_EQ(fnv1a64(std::string("a\0b\xff", 4)), 0x8fbf30b884e84b7dULL);
}

TEST(HashTest, HexIsSixteenLowercaseDigits) {
  EXPECT_EQ(Fnv1a64().hex(), "14650fb0739d0383");
  EXPECT_EQ(Fnv1a64().update("a").hex(), "44bd8ad473cd9906");
  EXPECT_EQ(hex64(0), "0000000000000000");
  EXPECT_EQ(hex64(0xABCDEFULL), "0000000000abcdef");
  // Suite ids take the low 32 bits as 8 digits (was "%08llx" of h & 0xffffffff).
  EXPECT_EQ(Fnv1a64().update("scenarios/ci-smoke.yaml").hex().substr(8), "8425f580");
}

TEST(HashTest, IncrementalEqualsWhole) {
  const std::string text = "resolved scenario text\n\x01\xfe";
  for (size_t k = 0; k <= text.size(); ++k) {
    Fnv1a64 h;
    h.update(std::string_view(text).substr(0, k));
    h.update(text.data() + k, text.size() - k);
    EXPECT_EQ(h.value(), fnv1a64(text)) << "split at " << k;
  }
  Fnv1a64 bytes;
  for (unsigned char c : text) bytes.update(c);
  EXPECT_EQ(bytes.value(), fnv1a64(text));
}

TEST(HashTest, ShardAssignmentIsUnchanged) {
  // (id, index of 3 shards, index of 4 shards), from the old stable_hash.
  const struct {
    const char* id;
    int64_t of3;
    int64_t of4;
  } cases[] = {{"ci-smoke", 1, 3}, {"seed-002-unstable-binarization", 0, 1}, {"kill", 2, 3}, {"x-1a2b3c4d", 0, 0}};
  for (const auto& c : cases) {
    for (int64_t i = 0; i < 4; ++i) {
      EXPECT_EQ(supervisor::in_shard(c.id, supervisor::Shard{i, 3, "test"}), i == c.of3) << c.id << " " << i << "/3";
      EXPECT_EQ(supervisor::in_shard(c.id, supervisor::Shard{i, 4, "test"}), i == c.of4) << c.id << " " << i << "/4";
    }
  }
}

}  // namespace
}  // namespace dbh::harness
