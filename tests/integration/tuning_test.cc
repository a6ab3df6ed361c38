// Measured choices (Note [Measured choices] in harness/supervisor/tuning.h):
// `train.channels_last` and `train.threads` left to `auto` are measured once
// per machine and setup, cached, reused, reported; explicit settings win.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <regex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kTiny = std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml";

struct DbhRun {
  testing::ProcessResult process;
  json report;
  std::string markdown;
};

// One step at 32 px, the smallest input: what is measured, cached and
// reported does not depend on the size, only which setup it belongs to.
// No budget unless told (Note [A measurement's budget]): beside other test
// programs a first step at 64² took over a second.
// Other processes' load (Note [A measurement to trust]): the test programs
// run beside each other, so the caching tests trust any load unless told
// `others_limit` (std::nullopt: dbh's own default).
DbhRun run(const fs::path& cache, const fs::path& out, std::vector<std::string> overrides,
           std::optional<std::string> others_limit = std::string("64"),
           std::optional<std::string> budget = std::string("0")) {
  std::vector<std::string> argv = {DBH_BINARY, "run", kTiny, "--out", out.string(), "-q",
                                   "train.max_steps=1", "data.size=32"};
  argv.insert(argv.end(), overrides.begin(), overrides.end());
  DbhRun r;
  r.process = testing::run_process_with_env(
      argv,
      {{"DBH_CACHE_DIR", cache.string()}, {"DBH_TUNE_MAX_OTHERS_CORES", others_limit}, {"DBH_TUNE_BUDGET_S", budget}},
      DBH_SOURCE_DIR, 180);
  r.report = json::parse(testing::read_text(out / "report.json"), nullptr, false);
  r.markdown = testing::read_text(out / "report.md");
  return r;
}

std::vector<fs::path> cache_entries(const fs::path& cache) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache / "tuning", ec)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  return files;
}

TEST(TuningTest, AutoIsMeasuredOnceCachedAndReported) {
  const fs::path dir = testing::fresh_dir("tuning");
  testing::RemoveOnExit cleanup(dir);
  const fs::path cache = dir / "cache";

  const DbhRun first = run(cache, dir / "first", {"train.channels_last=auto", "train.threads=auto"});
  ASSERT_EQ(first.process.exit_code, 0) << first.process.err;
  ASSERT_TRUE(first.report.is_object());
  const json& m = first.report["measured_choices"];
  ASSERT_TRUE(m.is_object()) << first.report.dump();
  EXPECT_FALSE(m.contains("error")) << m.dump();
  EXPECT_EQ(m["channels_last"]["source"], "measured");
  EXPECT_EQ(m["threads"]["source"], "measured");
  // Both layouts, each with every core and (with 2 or more) half of them.
  const auto cores = static_cast<size_t>(m["threads"]["value"].get<int64_t>());
  ASSERT_TRUE(m["timings"].is_array());
  EXPECT_GE(m["timings"].size(), 2u);
  int layouts[2] = {0, 0};
  for (const auto& t : m["timings"]) {
    layouts[t["channels_last"].get<bool>() ? 1 : 0] += 1;
    EXPECT_GT(t["best_seconds"].get<double>(), 0.0);
    EXPECT_GE(t["threads"].get<int64_t>(), 1);
  }
  EXPECT_EQ(layouts[0], layouts[1]);
  EXPECT_GE(cores, 1u);
  EXPECT_EQ(m["size"], 32);
  EXPECT_EQ(m["batch"], 2);
  // The choice is one of the candidates, and the worker trained with it.
  bool listed = false;
  for (const auto& t : m["timings"]) {
    listed = listed || (t["channels_last"] == m["channels_last"]["value"] && t["threads"] == m["threads"]["value"]);
  }
  EXPECT_TRUE(listed) << m.dump();
  const json resolved =
      json::parse(testing::read_text(dir / "first" / "main" / "scenario.resolved.json"), nullptr, false);
  ASSERT_TRUE(resolved.is_object());
  EXPECT_EQ(resolved["train"]["channels_last"], m["channels_last"]["value"]);
  EXPECT_EQ(resolved["train"]["threads"], m["threads"]["value"]);
  // The repro pins what was measured, so it runs the same whatever the cache
  // holds later.
  const std::string repro = first.report["repro"]["command"];
  EXPECT_NE(repro.find("train.channels_last=" + m["channels_last"]["value"].dump()), std::string::npos) << repro;
  EXPECT_NE(repro.find("train.threads=" + m["threads"]["value"].dump()), std::string::npos) << repro;
  EXPECT_NE(first.markdown.find("- Layout and threads: "), std::string::npos);
  EXPECT_NE(first.markdown.find("(measured)"), std::string::npos);
  // One cache entry; the measuring folder is gone.
  const auto entries = cache_entries(cache);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(m["cache"], entries.front().string());
  EXPECT_FALSE(fs::exists(dir / "first" / "main" / "tuning"));

  // The same setup again: the cached answer, nothing measured.
  const DbhRun second = run(cache, dir / "second", {"train.channels_last=auto", "train.threads=auto"});
  ASSERT_EQ(second.process.exit_code, 0) << second.process.err;
  const json& m2 = second.report["measured_choices"];
  EXPECT_FALSE(m2.contains("remeasured")) << m2.dump();
  EXPECT_EQ(m2["channels_last"]["source"], "cached");
  EXPECT_EQ(m2["channels_last"]["value"], m["channels_last"]["value"]);
  EXPECT_EQ(m2["threads"]["value"], m["threads"]["value"]);
  EXPECT_EQ(m2["timings"], m["timings"]);
  EXPECT_EQ(m2["measured_at"], m["measured_at"]);
  EXPECT_GE(m2["others_cores"].get<double>(), 0.0) << m2.dump();
  EXPECT_EQ(cache_entries(cache).size(), 1u);

  // A hand-edited or torn entry is no answer: measured again, replaced.
  testing::write_text(entries.front(),
                      R"({"choice": 0, "candidates": [{"channels_last": true, "threads": 100000, "seconds": [0.1]}]})");
  const DbhRun edited = run(cache, dir / "edited", {"train.channels_last=auto", "train.threads=auto"});
  ASSERT_EQ(edited.process.exit_code, 0) << edited.process.err;
  EXPECT_EQ(edited.report["measured_choices"]["threads"]["source"], "measured");
  EXPECT_LE(edited.report["measured_choices"]["threads"]["value"].get<int64_t>(), 1024);
  EXPECT_EQ(json::parse(testing::read_text(entries.front()), nullptr, false)["candidates"].size(), m["timings"].size());
  testing::write_text(entries.front(), "{\"choice\": ");
  const DbhRun torn = run(cache, dir / "torn", {"train.channels_last=auto", "train.threads=auto"});
  ASSERT_EQ(torn.process.exit_code, 0) << torn.process.err;
  EXPECT_EQ(torn.report["measured_choices"]["channels_last"]["source"], "measured");

  // A field of the wrong type, and a FIFO in the entry's place: measured
  // again, never a crash or a hang.
  {
    json entry = json::parse(testing::read_text(entries.front()));
    entry["others_cores"] = "yes";
    testing::write_text(entries.front(), entry.dump());
    const DbhRun typed = run(cache, dir / "typed", {"train.channels_last=auto", "train.threads=auto"});
    ASSERT_EQ(typed.process.exit_code, 0) << typed.process.err;
    EXPECT_EQ(typed.report["measured_choices"]["threads"]["source"], "measured");
  }
  // Well formed but not a measurement of this machine: more threads than it
  // has, a step time no step takes, a choice its own times do not make.
  for (int variant = 0; variant < 3; ++variant) {
    json entry = json::parse(testing::read_text(entries.front()));
    json& candidates = entry["candidates"];
    const size_t other = (entry["choice"].get<size_t>() + 1) % candidates.size();
    if (variant == 0) candidates[other]["threads"] = entry["cores"].get<int64_t>() + 1;
    if (variant == 1) candidates[other]["seconds"] = json::array({1e-9});
    if (variant == 2) {
      candidates[other]["seconds"] = json::array({1000.0});  // far the slowest
      entry["choice"] = other;
    }
    testing::write_text(entries.front(), entry.dump());
    const DbhRun forged = run(cache, dir / ("forged" + std::to_string(variant)),
                              {"train.channels_last=auto", "train.threads=auto"});
    ASSERT_EQ(forged.process.exit_code, 0) << forged.process.err;
    EXPECT_EQ(forged.report["measured_choices"]["threads"]["source"], "measured") << variant;
    EXPECT_LE(forged.report["measured_choices"]["threads"]["value"].get<int64_t>(),
              json::parse(testing::read_text(entries.front()))["cores"].get<int64_t>());
  }
  fs::remove(entries.front());
  ASSERT_EQ(::mkfifo(entries.front().c_str(), 0644), 0);
  const DbhRun fifo = run(cache, dir / "fifo", {"train.channels_last=auto", "train.threads=auto"});
  ASSERT_FALSE(fifo.process.timed_out);
  ASSERT_EQ(fifo.process.exit_code, 0) << fifo.process.err;
  EXPECT_EQ(fifo.report["measured_choices"]["threads"]["source"], "measured");
  EXPECT_TRUE(fs::is_regular_file(entries.front()));  // replaced by a real entry

  // Another input size is another setup.
  const DbhRun other = run(cache, dir / "other", {"train.channels_last=auto", "train.threads=auto", "data.size=64"});
  ASSERT_EQ(other.process.exit_code, 0) << other.process.err;
  EXPECT_EQ(other.report["measured_choices"]["channels_last"]["source"], "measured");
  EXPECT_EQ(cache_entries(cache).size(), 2u);
}

TEST(TuningTest, ExplicitSettingsAreNeverMeasured) {
  const fs::path dir = testing::fresh_dir("tuning-explicit");
  testing::RemoveOnExit cleanup(dir);
  const fs::path cache = dir / "cache";
  const DbhRun r = run(cache, dir / "out", {"train.channels_last=true", "train.threads=1"});
  ASSERT_EQ(r.process.exit_code, 0) << r.process.err;
  EXPECT_TRUE(r.report["measured_choices"].is_null()) << r.report["measured_choices"].dump();
  EXPECT_TRUE(cache_entries(cache).empty());
  const json resolved =
      json::parse(testing::read_text(dir / "out" / "main" / "scenario.resolved.json"), nullptr, false);
  EXPECT_EQ(resolved["train"]["channels_last"], true);
  EXPECT_EQ(resolved["train"]["threads"], 1);

  // One setting fixed, the other measured: only the open one has candidates.
  const DbhRun half = run(cache, dir / "half", {"train.channels_last=false", "train.threads=auto"});
  ASSERT_EQ(half.process.exit_code, 0) << half.process.err;
  const json& m = half.report["measured_choices"];
  ASSERT_TRUE(m.is_object());
  EXPECT_EQ(m["channels_last"]["source"], "explicit");
  EXPECT_EQ(m["channels_last"]["value"], false);
  EXPECT_EQ(m["threads"]["source"], "measured");
  for (const auto& t : m["timings"]) EXPECT_EQ(t["channels_last"], false);
}

// A CUDA scenario on a machine without an NVIDIA GPU is skipped: nothing is
// measured for it (no "measuring" line before the skip, nothing cached).
TEST(TuningTest, ACudaScenarioWithoutAGpuMeasuresNothing) {
  if (fs::exists("/proc/driver/nvidia/gpus") || fs::exists("/dev/nvidia0")) {
    GTEST_SKIP() << "this machine shows an NVIDIA GPU";
  }
  const fs::path dir = testing::fresh_dir("tuning-cuda-without-gpu");
  testing::RemoveOnExit cleanup(dir);
  const fs::path cache = dir / "cache";
  const DbhRun r = run(cache, dir / "out", {"hardware.device=cuda", "train.channels_last=auto", "train.threads=auto"});
  EXPECT_EQ(r.process.exit_code, 4) << r.process.out << r.process.err;
  EXPECT_EQ(r.process.err.find("measuring layout and threads"), std::string::npos) << r.process.err;
  EXPECT_TRUE(cache_entries(cache).empty());
  EXPECT_EQ(r.report["outcome"], "skipped") << r.report.dump(1);
  EXPECT_NE(r.markdown.find("not measured: this machine has no NVIDIA GPU"), std::string::npos) << r.markdown;
}

// Note [A measurement to trust]: timed while two busy loops hold both cores,
// the measurement decides nothing that lasts: PyTorch's defaults, said in the
// report, nothing cached; the same setup on a quiet machine is measured and
// cached (above).
// Two processes that keep two cores busy until destroyed.
class Burners {
 public:
  explicit Burners(const fs::path& dir) {
    for (int i = 0; i < 2; ++i) {
      pids_.push_back(testing::spawn_process({"/bin/sh", "-c", "while :; do :; done"}, dir.string(),
                                             (dir / ("burner" + std::to_string(i) + ".log")).string()));
    }
  }
  ~Burners() {
    for (const pid_t p : pids_) {
      ::kill(p, SIGKILL);
      testing::wait_process(p, 30);
    }
  }
  Burners(const Burners&) = delete;
  Burners& operator=(const Burners&) = delete;

 private:
  std::vector<pid_t> pids_;
};

TEST(TuningTest, AMeasurementUnderOtherProcessesLoadIsNotTrustedOrCached) {
  const fs::path dir = testing::fresh_dir("tuning-untrusted");
  testing::RemoveOnExit cleanup(dir);
  const fs::path cache = dir / "cache";
  std::optional<Burners> burners(std::in_place, dir);
  const DbhRun r = run(cache, dir / "out", {"train.channels_last=auto", "train.threads=auto"}, std::nullopt);
  burners.reset();
  ASSERT_EQ(r.process.exit_code, 0) << r.process.err;
  const json& m = r.report["measured_choices"];
  ASSERT_TRUE(m.is_object()) << r.report.dump();
  ASSERT_TRUE(m.contains("untrusted")) << m.dump();
  EXPECT_GT(m["others_cores"].get<double>(), 0.25) << m.dump();
  EXPECT_EQ(m["channels_last"]["source"], "default");
  EXPECT_EQ(m["channels_last"]["value"], false);
  EXPECT_EQ(m["threads"]["source"], "default");
  EXPECT_TRUE(cache_entries(cache).empty());
  EXPECT_NE(r.markdown.find("the measurement was not trusted"), std::string::npos) << r.markdown;
  // Never a silent minute: the measurement said what it did.
  EXPECT_NE(r.process.err.find("dbh: measuring layout and threads for resnet18+fpn at 32²"), std::string::npos)
      << r.process.err;
}

TEST(TuningTest, AFailedMeasurementFallsBackToPyTorchDefaultsAndIsNotCached) {
  const fs::path dir = testing::fresh_dir("tuning-fail");
  testing::RemoveOnExit cleanup(dir);
  const fs::path cache = dir / "cache";
  // The measuring worker stops at the scenario's deadline: far too short to
  // load LibTorch and time anything.
  const DbhRun r = run(cache, dir / "out",
                    {"train.channels_last=auto", "train.threads=auto", "limits.deadline_s=0.2", "limits.grace_s=0.2"});
  ASSERT_TRUE(r.report.is_object()) << r.process.err;
  const json& m = r.report["measured_choices"];
  ASSERT_TRUE(m.is_object());
  ASSERT_TRUE(m.contains("error")) << m.dump();
  EXPECT_NE(m["error"].get<std::string>().find("deadline"), std::string::npos) << m.dump();
  EXPECT_EQ(m["channels_last"]["source"], "default");
  EXPECT_EQ(m["channels_last"]["value"], false);
  EXPECT_TRUE(cache_entries(cache).empty());
  EXPECT_NE(r.markdown.find("the measurement failed"), std::string::npos);
  // Its folder stays, for the reason.
  EXPECT_TRUE(fs::exists(dir / "out" / "main" / "tuning" / "stderr.log"));
}

// `dbh tune`: measures ahead of the runs (a CI job's set-up), then a run takes
// the cached answer and measures nothing.
testing::ProcessResult tune(const fs::path& cache, std::vector<std::string> overrides,
                            std::optional<std::string> budget = std::string("0")) {
  std::vector<std::string> argv = {DBH_BINARY, "tune", kTiny, "train.max_steps=1", "data.size=32"};
  argv.insert(argv.end(), overrides.begin(), overrides.end());
  return testing::run_process_with_env(argv,
                                       {{"DBH_CACHE_DIR", cache.string()},
                                        {"DBH_TUNE_MAX_OTHERS_CORES", std::string("64")},
                                        {"DBH_TUNE_BUDGET_S", budget}},
                                       DBH_SOURCE_DIR, 180);
}

bool measuring_folder_left(const fs::path& cache) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(cache / "tuning", ec)) {
    if (e.path().filename().string().rfind("measuring-", 0) == 0) return true;
  }
  return false;
}

TEST(TuningTest, TuneMeasuresAheadAndARunTakesTheCachedAnswer) {
  const fs::path dir = testing::fresh_dir("tuning-tune");
  testing::RemoveOnExit cleanup(dir);
  const fs::path cache = dir / "cache";
  const auto first = tune(cache, {"train.channels_last=auto", "train.threads=auto"});
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_NE(first.out.find("tiny-cpu: measured: "), std::string::npos) << first.out;
  EXPECT_NE(first.err.find("dbh: measuring layout and threads for resnet18+fpn at 32²"), std::string::npos) << first.err;
  EXPECT_EQ(cache_entries(cache).size(), 1u);
  EXPECT_FALSE(measuring_folder_left(cache));
  const auto second = tune(cache, {"train.channels_last=auto", "train.threads=auto"});
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  EXPECT_NE(second.out.find("tiny-cpu: cached: "), std::string::npos) << second.out;
  EXPECT_EQ(second.err.find("dbh: measuring"), std::string::npos) << second.err;
  const DbhRun r = run(cache, dir / "out", {"train.channels_last=auto", "train.threads=auto"});
  ASSERT_EQ(r.process.exit_code, 0) << r.process.err;
  EXPECT_EQ(r.report["measured_choices"]["channels_last"]["source"], "cached") << r.report["measured_choices"].dump();
  EXPECT_EQ(r.process.err.find("dbh: measuring"), std::string::npos) << r.process.err;
  // Explicit settings: nothing to choose, nothing measured.
  const auto fixed = tune(cache, {"train.channels_last=false", "train.threads=1"});
  EXPECT_EQ(fixed.exit_code, 0) << fixed.err;
  EXPECT_NE(fixed.out.find("tiny-cpu: nothing to choose"), std::string::npos) << fixed.out;
}

// Note [No silent minute]: a measurement longer than a couple of seconds
// counts its timed steps on stderr, with the time it expects to take (a log
// gets plain lines; the worker reports each step as `tuning_progress`).
TEST(TuningTest, AMeasurementCountsItsTimedSteps) {
  const fs::path dir = testing::fresh_dir("tuning-progress");
  testing::RemoveOnExit cleanup(dir);
  const auto r = tune(dir / "cache", {"data.size=160", "train.channels_last=auto", "train.threads=auto"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::regex line(R"(dbh: measuring layout and threads: (\d+)/(\d+) timed steps, \d+ s(, about \d+ s left)?)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, line)) << r.err;
  EXPECT_GE(std::stoi(m[1].str()), 1);
  EXPECT_LE(std::stoi(m[1].str()), std::stoi(m[2].str()));
}

TEST(TuningTest, TuneSaysWhenAMeasurementFailedAndCachesNothing) {
  const fs::path dir = testing::fresh_dir("tuning-tune-fail");
  testing::RemoveOnExit cleanup(dir);
  const fs::path cache = dir / "cache";
  const auto r = tune(cache, {"train.channels_last=auto", "train.threads=auto", "limits.deadline_s=0.2",
                              "limits.grace_s=0.2"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("tiny-cpu: failed: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PyTorch's defaults"), std::string::npos) << r.out;
  EXPECT_TRUE(cache_entries(cache).empty());
  EXPECT_FALSE(measuring_folder_left(cache));
  // Bad input: refused before anything is measured.
  const auto bad = tune(cache, {"train.threads=many"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("train.threads"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.err.find("dbh: measuring"), std::string::npos) << bad.err;
  // A cache that is a file: refused before anything is measured.
  testing::write_text(dir / "not-a-folder", "x");
  const auto file_cache = tune(dir / "not-a-folder", {"train.channels_last=auto", "train.threads=auto"});
  EXPECT_EQ(file_cache.exit_code, 2) << file_cache.out << file_cache.err;
  EXPECT_NE(file_cache.err.find("expected a folder to keep the measurements in, got a regular file"),
            std::string::npos)
      << file_cache.err;
  EXPECT_EQ(file_cache.err.find("dbh: measuring"), std::string::npos) << file_cache.err;
}

// Note [A measurement's budget]: when the first warm-up step shows that
// timing every candidate would cost more than the budget, the run keeps
// PyTorch's defaults, says why, and caches the verdict, so the next run does
// not pay the step again; `dbh tune` measures whatever it takes.
TEST(TuningTest, AMeasurementOverItsBudgetKeepsPyTorchsDefaultsUntilTuneMeasures) {
  const fs::path dir = testing::fresh_dir("tuning-budget");
  testing::RemoveOnExit cleanup(dir);
  const fs::path cache = dir / "cache";
  const std::vector<std::string> autos = {"train.channels_last=auto", "train.threads=auto"};
  const std::string tiny = "0.000001";  // seconds: no step fits

  const DbhRun first = run(cache, dir / "first", autos, std::string("64"), tiny);
  ASSERT_EQ(first.process.exit_code, 0) << first.process.err;
  const json& m = first.report["measured_choices"];
  ASSERT_TRUE(m.is_object()) << first.report.dump();
  EXPECT_FALSE(m.contains("error")) << m.dump();
  EXPECT_EQ(m["channels_last"]["source"], "default") << m.dump();
  EXPECT_EQ(m["channels_last"]["value"], false);
  EXPECT_EQ(m["threads"]["source"], "default");
  EXPECT_GT(m.value("over_budget_step_seconds", 0.0), 0.0) << m.dump();
  EXPECT_FALSE(m.contains("timings")) << m.dump();
  EXPECT_NE(first.process.err.find("dbh: not measuring layout and threads: a first step took"), std::string::npos)
      << first.process.err;
  EXPECT_NE(first.markdown.find("not measured: a first step took"), std::string::npos) << first.markdown;
  const auto entries = cache_entries(cache);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(m["cache"], entries.front().string());
  EXPECT_FALSE(measuring_folder_left(cache));
  const json resolved =
      json::parse(testing::read_text(dir / "first" / "main" / "scenario.resolved.json"), nullptr, false);
  EXPECT_EQ(resolved["train"]["channels_last"], false);

  // The verdict is cached: the next run does not pay the step again.
  const DbhRun second = run(cache, dir / "second", autos, std::string("64"), tiny);
  ASSERT_EQ(second.process.exit_code, 0) << second.process.err;
  EXPECT_EQ(second.process.err.find("dbh: measuring"), std::string::npos) << second.process.err;
  EXPECT_TRUE(second.report["measured_choices"].contains("over_budget")) << second.report["measured_choices"].dump();

  // `dbh tune` measures whatever it takes, and runs take its answer: the
  // command the report names, run as pasted from another folder.
  const std::string why = m.value("over_budget", "");
  const auto from = why.find('`'), to = why.find('`', from + 1);
  ASSERT_NE(to, std::string::npos) << why;
  const std::string printed = why.substr(from + 1, to - from - 1);
  EXPECT_NE(printed.find(" tune " + std::string(kTiny) + " "), std::string::npos) << printed;
  const auto ahead = testing::run_process_with_env(
      {"/bin/sh", "-c", printed},
      {{"DBH_CACHE_DIR", cache.string()}, {"DBH_TUNE_MAX_OTHERS_CORES", std::string("64")},
       {"DBH_TUNE_BUDGET_S", tiny}},
      dir.string(), 180);
  ASSERT_EQ(ahead.exit_code, 0) << printed << "\n" << ahead.out << ahead.err;
  EXPECT_NE(ahead.out.find("tiny-cpu: measured: "), std::string::npos) << ahead.out;
  const DbhRun third = run(cache, dir / "third", autos, std::string("64"), tiny);
  ASSERT_EQ(third.process.exit_code, 0) << third.process.err;
  const json& m3 = third.report["measured_choices"];
  EXPECT_EQ(m3["channels_last"]["source"], "cached") << m3.dump();
  EXPECT_FALSE(m3.contains("over_budget")) << m3.dump();
  EXPECT_EQ(cache_entries(cache).size(), 1u);
}

// Note [A measurement's budget]: a step many times a batch-1 step at a
// quarter of the side is judged from that small step, before any full one:
// the verdict names the probe and is cached like the first step's.
TEST(TuningTest, ALargeStepIsJudgedFromASmallProbeStep) {
  const fs::path dir = testing::fresh_dir("tuning-probe");
  testing::RemoveOnExit cleanup(dir);
  const fs::path cache = dir / "cache";
  const DbhRun r = run(cache, dir / "out", {"train.channels_last=auto", "train.threads=auto", "data.size=192"},
                       std::string("64"), std::string("0.000001"));
  ASSERT_EQ(r.process.exit_code, 0) << r.process.err;
  const json& m = r.report["measured_choices"];
  ASSERT_TRUE(m.contains("over_budget")) << m.dump();
  EXPECT_EQ(m.value("over_budget_probe_size", int64_t{0}), 64) << m.dump();
  EXPECT_GT(m.value("over_budget_step_seconds", 0.0), 0.0) << m.dump();
  EXPECT_EQ(m["channels_last"]["source"], "default") << m.dump();
  EXPECT_NE(r.process.err.find("dbh: not measuring layout and threads: a step is about "), std::string::npos)
      << r.process.err;
  EXPECT_NE(r.process.err.find("(a batch-1 step at 64², by pixels)"), std::string::npos) << r.process.err;
  EXPECT_NE(r.markdown.find("a batch-1 step at 64²"), std::string::npos) << r.markdown;
  const auto entries = cache_entries(cache);
  ASSERT_EQ(entries.size(), 1u);
  const json entry = json::parse(testing::read_text(entries.front()), nullptr, false);
  EXPECT_EQ(entry.value("probe_size", int64_t{0}), 64) << entry.dump();
  // The cached verdict says the same on the next run, without measuring.
  const DbhRun second = run(cache, dir / "second", {"train.channels_last=auto", "train.threads=auto", "data.size=192"},
                            std::string("64"), std::string("0.000001"));
  ASSERT_EQ(second.process.exit_code, 0) << second.process.err;
  EXPECT_EQ(second.process.err.find("dbh: measuring"), std::string::npos) << second.process.err;
  EXPECT_NE(second.report["measured_choices"].value("over_budget", std::string()).find("a batch-1 step at 64²"),
            std::string::npos)
      << second.report["measured_choices"].dump();
}

// The budget and the load limit are numbers; anything else is refused before
// anything is written, naming the variable.
TEST(TuningTest, AnUnreadableBudgetOrLoadLimitIsRefused) {
  const fs::path dir = testing::fresh_dir("tuning-bad-env");
  testing::RemoveOnExit cleanup(dir);
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"DBH_TUNE_BUDGET_S", "ten"}, {"DBH_TUNE_BUDGET_S", "-1"}, {"DBH_TUNE_BUDGET_S", "0x10"},
           {"DBH_TUNE_MAX_OTHERS_CORES", "nan"}}) {
    const fs::path out = dir / "out";
    const auto r = testing::run_process_with_env(
        {DBH_BINARY, "run", kTiny, "--out", out.string(), "-q", "train.max_steps=1", "data.size=32",
         "train.channels_last=auto", "train.threads=auto"},
        {{"DBH_CACHE_DIR", (dir / "cache").string()}, {name, value}}, DBH_SOURCE_DIR, 180);
    EXPECT_EQ(r.exit_code, 2) << name << "=" << value << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(name + ": expected a number of"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("got \"" + value + "\""), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out)) << name << "=" << value;
  }
}

// A verdict taken while other processes kept the cores busy holds for that
// run only (Note [A measurement to trust]): a busy machine slows the first
// step, and the setup is measured again on a quieter one.
TEST(TuningTest, AVerdictOverBudgetUnderOtherProcessesLoadIsNotCached) {
  const fs::path dir = testing::fresh_dir("tuning-budget-busy");
  testing::RemoveOnExit cleanup(dir);
  const fs::path cache = dir / "cache";
  std::optional<Burners> burners(std::in_place, dir);
  const DbhRun r = run(cache, dir / "out", {"train.channels_last=auto", "train.threads=auto"}, std::nullopt,
                       std::string("0.000001"));
  burners.reset();
  ASSERT_EQ(r.process.exit_code, 0) << r.process.err;
  const json& m = r.report["measured_choices"];
  ASSERT_TRUE(m.contains("over_budget")) << m.dump();
  EXPECT_EQ(m["channels_last"]["source"], "default");
  EXPECT_NE(m.value("cache_note", std::string()).find("not cached: other processes kept"), std::string::npos)
      << m.dump();
  EXPECT_TRUE(cache_entries(cache).empty());
}

}  // namespace
}  // namespace dbh
