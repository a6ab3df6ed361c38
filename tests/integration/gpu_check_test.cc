// The GPU pack's dry run (scripts/gpu-check.sh with DBH_GPU_DRY_RUN=1): on a
// machine without a GPU it checks every command the GPU run will execute
// (scenarios and overrides load, profiles exist, tools and paths are there),
// so the few minutes of a lent GPU are never lost to a typo.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;

testing::ProcessResult dry_run(const testing::ScratchDir& dir, const std::string& profiles) {
  const std::string source = DBH_SOURCE_DIR;
  const char* path = std::getenv("PATH");
  testing::EnvChanges env = {
      {"DBH_GPU_DRY_RUN", "1"},
      {"OUT", (dir / "out").string()},
      {"DBH_GPU_WORK", (dir / "work").string()},
      {"DBH_GPU_BIN", fs::path(DBH_BINARY).parent_path().string()},
      {"DBH_GPU_PYTHON", source + "/.venv/bin/python"},
      {"PATH", source + "/.venv/bin:" + (path != nullptr ? path : "/usr/bin:/bin")},
  };
  if (!profiles.empty()) env["DBH_GPU_PROFILES"] = profiles;
  return testing::run_process_with_env({source + "/scripts/gpu-check.sh", "all"}, env, source, 300);
}

TEST(GpuCheckDryRunTest, EveryCommandOfTheGpuRunChecksOutHere) {
  const testing::ScratchDir dir("dbh-gpu-dry");
  const auto r = dry_run(dir, "");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("dry-run FAILED"), std::string::npos) << r.out;
  // Each scenario of the pack, the qualification's profiles, the diagnosis,
  // the sanitizer's run, the benchmarks, the cuDNN-engine attempt and the
  // packing were checked, and each part's time is printed.
  for (const auto& e : fs::directory_iterator(std::string(DBH_SOURCE_DIR) + "/scenarios/gpu")) {
    EXPECT_NE(r.out.find("suite scenario scenarios/gpu/" + e.path().filename().string() + " loads"), std::string::npos)
        << e.path();
  }
  for (const char* line : {"profile rtx3060-12gb exists", "profile t4-16gb exists",
                           "diagnose scenarios/gpu/seed-000-illegal-instruction.yaml", "run scenarios/gpu/cudnn-benchmark.yaml",
                           "the GPU integration tests (Gpu*) are in dbh_integration_tests",
                           "run tests/bench/scenarios/step-640.yaml hardware.device=cuda loads",
                           "the throughput benchmarks (ResNet-18/50, 640², fp32 and bf16) are in dbh_benchmarks",
                           "data.batch_size=8 train.max_steps=1 hardware.memory_budget=10.6GiB loads",
                           "tests/gpu/fault_probe.cu and nvcc", "tar can pack",
                           // The user's own training (verb own): each command it runs loads.
                           "python3 with torch, lightning and hydra",
                           "run examples/lightning-dbnet/scenarios/nan-in-fusion.yaml hardware.device=cuda loads",
                           "run examples/lightning-dbnet/scenarios/clean.yaml hardware.device=cuda "
                           "hardware.memory_budget=1GiB data.size=640 data.batch_size=32 train.max_steps=2 loads",
                           "repeat examples/lightning-dbnet/scenarios/clean.yaml hardware.device=cuda loads",
                           "qualify examples/lightning-dbnet/scenarios/clean.yaml hardware.device=cuda data.size=640 loads"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
  for (const char* part : {"build", "pack", "qualify", "diagnose", "sanitize", "bench"}) {
    EXPECT_NE(r.out.find(std::string("time: ") + part + " "), std::string::npos) << part << "\n" << r.out;
  }
}

TEST(GpuCheckDryRunTest, ATypoFailsTheDryRunNamingIt) {
  const testing::ScratchDir dir("dbh-gpu-dry-typo");
  const auto r = dry_run(dir, "rtx3060-12gb t4-16gbb");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("dry-run FAILED: profile t4-16gbb exists"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace dbh
