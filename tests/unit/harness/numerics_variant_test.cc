// Note [Real differences measure the noise]: which difference each process of
// a numerics run makes, and what it does to the trial.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/supervisor/numerics_variant.h"

namespace dbh::harness::supervisor {
namespace {

using scenario::NumericsVariant;

const std::vector<std::string> kAvx512 = {"default", "avx2", "avx512"};

TEST(NumericsVariantTest, ProcessesTakeAsIsOneThreadAndAnotherInstructionSetInTurn) {
  std::vector<NumericsVariant> got;
  for (int64_t k = 0; k < 4; ++k) got.push_back(variant_setting(NumericsVariant::kByProcess, k, false, kAvx512, "").variant);
  EXPECT_EQ(got, (std::vector<NumericsVariant>{NumericsVariant::kAsIs, NumericsVariant::kOneThread,
                                               NumericsVariant::kInstructionSet, NumericsVariant::kAsIs}));
  EXPECT_EQ(variant_setting(NumericsVariant::kByProcess, 2, true, kAvx512, "").variant,
            NumericsVariant::kCudnnAlgorithms);
  EXPECT_EQ(variant_of_process(5, false), NumericsVariant::kInstructionSet);
}

TEST(NumericsVariantTest, AnotherInstructionSetIsTheScalarOneOrTheBestFromIt) {
  const VariantSetting best = variant_setting(NumericsVariant::kInstructionSet, 0, false, kAvx512, "");
  EXPECT_EQ(best.env, (std::vector<std::pair<std::string, std::string>>{{"ATEN_CPU_CAPABILITY", "default"}}));
  EXPECT_EQ(best.description, "ATEN_CPU_CAPABILITY=default (not avx512)");
  const VariantSetting from_default = variant_setting(NumericsVariant::kInstructionSet, 0, false, kAvx512, "DEFAULT");
  EXPECT_EQ(from_default.env.front().second, "avx512");
  // A value this CPU does not run is its best.
  EXPECT_EQ(variant_setting(NumericsVariant::kInstructionSet, 0, false, {"default", "avx2"}, "avx512").description,
            "ATEN_CPU_CAPABILITY=default (not avx2)");
  // One instruction set only: another thread count instead, and it says so.
  const VariantSetting one = variant_setting(NumericsVariant::kInstructionSet, 0, false, {"default"}, "");
  EXPECT_EQ(one.variant, NumericsVariant::kOneThread);
  EXPECT_NE(one.description.find("this CPU runs one instruction set"), std::string::npos);
  // cuDNN's choice needs dbh's worker on CUDA; elsewhere the instruction set.
  EXPECT_EQ(variant_setting(NumericsVariant::kCudnnAlgorithms, 0, false, kAvx512, "").variant,
            NumericsVariant::kInstructionSet);
}

TEST(NumericsVariantTest, AVariantChangesHowTheTrialComputesNeverWhat) {
  scenario::Scenario s;
  s.train.threads = 2;
  const scenario::Scenario before = s;
  apply_variant(variant_setting(NumericsVariant::kOneThread, 0, false, kAvx512, ""), s);
  EXPECT_EQ(s.train.threads, 1);
  EXPECT_TRUE(s.worker.env.empty());  // dbh's own worker gets the variables from the trial
  s = before;
  apply_variant(variant_setting(NumericsVariant::kCudnnAlgorithms, 0, true, kAvx512, ""), s);
  EXPECT_NE(s.hardware.cudnn_benchmark, before.hardware.cudnn_benchmark);
  EXPECT_EQ(s.train.threads, 2);
  // An external worker: its environment, through worker.env.
  s = before;
  s.worker.command = {"python", "train.py"};
  apply_variant(variant_setting(NumericsVariant::kOneThread, 0, false, kAvx512, ""), s);
  EXPECT_EQ(s.worker.env.at("OMP_NUM_THREADS"), "1");
  apply_variant(variant_setting(NumericsVariant::kInstructionSet, 0, false, kAvx512, ""), s);
  EXPECT_EQ(s.worker.env.at("ATEN_CPU_CAPABILITY"), "default");
  EXPECT_EQ(variant_setting(NumericsVariant::kAsIs, 0, false, kAvx512, "").description, "as configured");
}

TEST(NumericsVariantTest, ThisCpusInstructionSetsStartWithTheScalarOne) {
  const auto caps = cpu_capabilities();
  ASSERT_FALSE(caps.empty());
  EXPECT_EQ(caps.front(), "default");
}

}  // namespace
}  // namespace dbh::harness::supervisor
