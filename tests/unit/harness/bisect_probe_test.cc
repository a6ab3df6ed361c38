// The probe cache's key and bounds, and what counts as an infrastructure
// failure of a probe (harness/probe/probe.h).
#include <gtest/gtest.h>

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "harness/probe/probe.h"
#include "tests/support/paths.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;

class BisectProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::path(::testing::TempDir()) / "dbh-probe-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    fs::create_directories(dir_ / "data" / "images");
    write(dir_ / "data" / "images" / "a.png", std::string(100, 'x'));
    write(dir_ / "data" / "annotations.json", R"({"images": {"a.png": {"words": {}}}})");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static void write(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
  }
  // A scenario training on the dataset under dir_.
  fs::path scenario() {
    const fs::path p = dir_ / "s.yaml";
    write(p, "include: " + std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml\n" +
                 "data: {source: real, path: data}\n");
    return p;
  }
  fs::path dir_;
};

TEST_F(BisectProbeTest, EveryDatasetChangeChangesTheInputFingerprint) {
  const scenario::Scenario s = scenario::load_scenario(scenario().string());
  const std::string f0 = probe::input_fingerprint(s);
  EXPECT_EQ(f0, probe::input_fingerprint(s)) << "the fingerprint of unchanged files is stable";

  // An image repaired in place: new size.
  write(dir_ / "data" / "images" / "a.png", std::string(120, 'x'));
  const std::string f1 = probe::input_fingerprint(s);
  EXPECT_NE(f1, f0);

  // Only its mtime changes.
  const auto image = dir_ / "data" / "images" / "a.png";
  fs::last_write_time(image, fs::last_write_time(image) + std::chrono::seconds(5));
  const std::string f2 = probe::input_fingerprint(s);
  EXPECT_NE(f2, f1);

  // An annotation edited to the same size with its mtime put back: the
  // content decides.
  const auto ann = dir_ / "data" / "annotations.json";
  const auto mtime = fs::last_write_time(ann);
  write(ann, R"({"images": {"a.png": {"words": {}}}} )");
  fs::last_write_time(ann, mtime);
  const std::string f3a = probe::input_fingerprint(s);
  write(ann, R"({"images": {"a.png": {"words": {}}}}
)");
  fs::last_write_time(ann, mtime);
  EXPECT_NE(probe::input_fingerprint(s), f3a);

  // A new file in the dataset folder.
  const std::string f4 = probe::input_fingerprint(s);
  write(dir_ / "data" / "images" / "b.png", "y");
  EXPECT_NE(probe::input_fingerprint(s), f4);
}

TEST_F(BisectProbeTest, WeightsAndCheckpointsAreFingerprinted) {
  scenario::Scenario s = scenario::load_scenario(scenario().string());
  s.data.source = scenario::DataSource::kSyntheticBoxes;
  const std::string none = probe::input_fingerprint(s);
  s.model.weights = (dir_ / "w.pt").string();
  write(s.model.weights, "weights v1");
  const std::string w1 = probe::input_fingerprint(s);
  EXPECT_NE(w1, none);
  write(s.model.weights, "weights v2 (longer)");
  EXPECT_NE(probe::input_fingerprint(s), w1);
  s.train.resume_from = (dir_ / "missing.pt").string();
  const std::string missing = probe::input_fingerprint(s);
  write(s.train.resume_from, "checkpoint");
  EXPECT_NE(probe::input_fingerprint(s), missing);
}

// Note [Input manifest]: each input changed between two keys of the same
// scenario gives another key (a fresh probe, never an old answer).
TEST_F(BisectProbeTest, EveryInputOnTheManifestChangesTheKey) {
  fs::create_directories(dir_ / "val" / "images");
  write(dir_ / "val" / "images" / "a.png", std::string(100, 'x'));
  write(dir_ / "val" / "annotations.json", R"({"images": {"a.png": {"words": {}}}})");
  write(dir_ / "train.py", "print('v1')\n");
  write(dir_ / "v.yaml", "include: " + std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml\n" +
                              "data: {source: real, path: data, val: {path: val}}\n");
  const scenario::Scenario s = scenario::load_scenario((dir_ / "v.yaml").string());
  const std::string k0 = probe::probe_key(s);

  // A variable that changes what a library does (here OpenCV's decoding limit).
  ASSERT_EQ(::setenv("OPENCV_IO_MAX_IMAGE_PIXELS", "1024", 1), 0);
  const std::string k_env = probe::probe_key(s);
  ::unsetenv("OPENCV_IO_MAX_IMAGE_PIXELS");
  EXPECT_NE(k_env, k0) << "an outcome variable is on the manifest";
  EXPECT_EQ(probe::probe_key(s), k0);
  // A variable that only says where to write is not.
  ASSERT_EQ(::setenv("GITHUB_STEP_SUMMARY", "/elsewhere", 1), 0);
  EXPECT_EQ(probe::probe_key(s), k0) << "a reporting variable changes no outcome";
  ::unsetenv("GITHUB_STEP_SUMMARY");

  // The validation dataset, by content.
  write(dir_ / "val" / "annotations.json", R"({"images": {"a.png": {"words": {"w": {}}}}})");
  const std::string k_val = probe::probe_key(s);
  EXPECT_NE(k_val, k0) << "the validation dataset is on the manifest";

  // The knowledge base that classifies failures (under DBH_HOME).
  fs::create_directories(dir_ / "home" / "reports" / "kb");
  fs::copy_file(std::string(DBH_SOURCE_DIR) + "/reports/kb/failures.yaml", dir_ / "home" / "reports" / "kb" / "failures.yaml");
  ASSERT_EQ(::setenv("DBH_HOME", (dir_ / "home").c_str(), 1), 0);
  const std::string k_home = probe::probe_key(s);
  std::ofstream(dir_ / "home" / "reports" / "kb" / "failures.yaml", std::ios::app) << "# edited\n";
  const std::string k_kb = probe::probe_key(s);
  ::unsetenv("DBH_HOME");
  EXPECT_NE(k_kb, k_home) << "an edited knowledge base is on the manifest";

  // An external worker: the files its command names.
  write(dir_ / "w.yaml", "include: v.yaml\nworker: {command: [python3, train.py], cwd: " + dir_.string() + "}\n");
  const scenario::Scenario w = scenario::load_scenario((dir_ / "w.yaml").string());
  const std::string k_w = probe::probe_key(w);
  write(dir_ / "train.py", "print('v2')\n");
  EXPECT_NE(probe::probe_key(w), k_w) << "the user's training script is on the manifest";
  bool listed = false;
  for (const auto& [what, fingerprint] : probe::input_manifest(w).entries) listed = listed || what.find("train.py") != std::string::npos;
  EXPECT_TRUE(listed);
}

TEST_F(BisectProbeTest, CacheKeyCoversScenarioInputsAndEnvironment) {
  const scenario::Scenario s = scenario::load_scenario(scenario().string());
  const std::string k0 = probe::probe_key(s);
  EXPECT_EQ(k0.size(), 32u);
  EXPECT_EQ(k0, probe::probe_key(s));
  EXPECT_NE(probe::probe_key(scenario::load_scenario(scenario().string(), {"train.max_steps=7"})), k0);
  write(dir_ / "data" / "images" / "a.png", "repaired");
  const std::string k1 = probe::probe_key(s);
  EXPECT_NE(k1, k0) << "a repaired dataset is a different probe";
  EXPECT_NE(probe::probe_key(s, "torch 2.11.0, CUDA 13.0, cuDNN 9.19, NVIDIA H100"), k1)
      << "another device or library is a different probe";
  EXPECT_EQ(probe::build_identity(), probe::build_identity());
  EXPECT_EQ(probe::build_identity().size(), 32u);
  EXPECT_EQ(supervisor::machine_identity().size(), 32u);
}

TEST_F(BisectProbeTest, CacheTrimRemovesTheOldestResultsBeyondTheCap) {
  const fs::path cache = dir_ / "cache";
  fs::create_directories(cache);
  const auto now = fs::file_time_type::clock::now();
  // Entries are named by their 32-hex-digit key (and "-metrics" when judged by metrics).
  const auto entry = [&](int i) {
    return cache / (std::string(31, 'a') + std::to_string(i) + (i % 2 ? "-metrics" : "") + ".json");
  };
  // A stored result: a JSON object whose key is its file's stem (Prober::store).
  const auto result = [](const fs::path& p) {
    const std::string head = "{\"key\": \"" + p.stem().string() + "\", \"scenario_hash\": \"h\", \"pad\": \"";
    return head + std::string(1000 - head.size() - 3, 'j') + "\"}\n";
  };
  for (int i = 0; i < 10; ++i) {
    write(entry(i), result(entry(i)));
    fs::last_write_time(entry(i), now - std::chrono::minutes(10 - i));  // 0 oldest, 9 newest
  }
  // Not results: never counted or removed, however old (--cache may name a
  // folder of the user's own), even under a result's name.
  write(cache / "notes.txt", std::string(5000, 'n'));
  write(cache / "config.json", std::string(5000, 'c'));
  const fs::path users = cache / (std::string(32, 'b') + ".json");
  write(users, std::string(5000, 'u'));
  const fs::path other_key = cache / (std::string(32, 'c') + ".json");
  write(other_key, "{\"key\": \"" + std::string(32, 'd') + "\", \"scenario_hash\": \"h\"}\n");
  for (const auto& p : {cache / "config.json", users, other_key}) fs::last_write_time(p, now - std::chrono::hours(1));
  EXPECT_EQ(probe::trim_probe_cache(cache.string(), 10000), 0);
  EXPECT_EQ(probe::trim_probe_cache(cache.string(), 4500), 6);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(fs::exists(entry(i)), i >= 6) << i;
  EXPECT_TRUE(fs::exists(cache / "notes.txt"));
  EXPECT_EQ(probe::trim_probe_cache(cache.string(), 0), 4);
  EXPECT_TRUE(fs::exists(cache / "config.json"));
  EXPECT_TRUE(fs::exists(users));
  EXPECT_TRUE(fs::exists(other_key));
}

TEST(BisectInfrastructureTest, FullDiskStopAndSpawnFailureAreNotTrainingFailures) {
  supervisor::TrialAnalysis failed;
  failed.outcome = scenario::Outcome::kFailed;
  failed.failure.message = "non-finite activation (decoder.smooth3) at step 7";
  EXPECT_EQ(probe::infrastructure_failure(supervisor::TrialResult{}, failed), "") << "an ordinary failure is an answer";

  supervisor::TrialResult disk;
  disk.term_signal = 6;
  disk.stderr_tail = "terminate called after throwing\nwrite /tmp/x/checkpoint-r0-s2.pt: No space left on device\n";
  const std::string why = probe::infrastructure_failure(disk, supervisor::TrialAnalysis{});
  EXPECT_NE(why.find("full disk"), std::string::npos) << why;
  EXPECT_NE(why.find("No space left on device"), std::string::npos) << why;

  supervisor::TrialAnalysis writer;
  writer.outcome = scenario::Outcome::kFailed;
  writer.failure.message = "[enforce fail at inline_container.cc:626] . PytorchStreamWriter failed writing file data/3";
  EXPECT_NE(probe::infrastructure_failure(supervisor::TrialResult{}, writer), "");

  supervisor::TrialResult spawn;
  spawn.spawn_error = "cannot start /nonexistent/dbh: No such file or directory";
  EXPECT_NE(probe::infrastructure_failure(spawn, supervisor::TrialAnalysis{}).find("expected a worker process"), std::string::npos);

  supervisor::TrialResult journal;
  journal.journal_error = "/x/events.jsonl: expected a writable file, got a write error (No space left on device)";
  EXPECT_NE(probe::infrastructure_failure(journal, supervisor::TrialAnalysis{}), "");

  supervisor::TrialResult stopped;
  stopped.interrupted = true;
  EXPECT_NE(probe::infrastructure_failure(stopped, supervisor::TrialAnalysis{}), "");
}

TEST(BisectInfrastructureTest, FailedBeforeTrainingMeansNoStepAtAll) {
  supervisor::TrialAnalysis a;
  a.outcome = scenario::Outcome::kFailed;
  EXPECT_TRUE(probe::failed_before_training(a));
  a.failure.step = 0;
  EXPECT_FALSE(probe::failed_before_training(a)) << "a failure at step 0 is a training failure";
  a.failure.step.reset();
  a.steps_completed = 2;
  EXPECT_FALSE(probe::failed_before_training(a));
  supervisor::TrialAnalysis passed;
  passed.outcome = scenario::Outcome::kPassed;
  EXPECT_FALSE(probe::failed_before_training(passed));
}

TEST(ProbeProgressTest, SaysWhichProbeHowFarAndHowLong) {
  EXPECT_EQ(probe::probe_progress(3, "fp32 batch 2 (margined budget)", 4, 12, 23.7),
            "  probe  3  fp32 batch 2 (margined budget)  running: step 4/12, 23 s");
  // Before the first step ends: the time alone.
  EXPECT_EQ(probe::probe_progress(12, "the scenario as given", 0, 6, 1.2), "  probe 12  the scenario as given  running: 1 s");
  // A label is one line, whatever it holds.
  EXPECT_EQ(probe::probe_progress(1, "a\nb", 1, 1, 0), "  probe  1  a b  running: step 1/1, 0 s");
}

}  // namespace
}  // namespace dbh::harness

namespace dbh::harness::probe {
namespace {

// Note [Probes ahead of warm ones]: a probe ahead starts cold; where the
// search's own probes fork warm it runs only once a warm probe is measured
// as longer than the worker's start.
TEST(AheadPaysTest, ColdProbesAheadOfWarmOnesRunOnlyWhenAProbeOutlastsTheStart) {
  std::string why;
  EXPECT_TRUE(ahead_pays({}, &why)) << "no warm worker: every probe starts cold, ahead or not";
  EXPECT_TRUE(why.empty());
  AheadCosts c;
  c.warm = true;
  EXPECT_FALSE(ahead_pays(c, &why));
  EXPECT_NE(why.find("once a warm probe is measured"), std::string::npos) << why;
  c.start_seconds = 6.8;
  c.warm_probe_seconds = 0.9;
  EXPECT_FALSE(ahead_pays(c, &why));
  EXPECT_NE(why.find("a warm probe takes 0.9 s"), std::string::npos) << why;
  EXPECT_NE(why.find("(6.8 s)"), std::string::npos) << why;
  EXPECT_NE(why.find("--cold"), std::string::npos) << why;
  c.warm_probe_seconds = 180;  // a training of minutes: the start is small beside it
  why.clear();
  EXPECT_TRUE(ahead_pays(c, &why)) << why;
}

ProbeResult ran(double seconds, bool forked, bool cached = false, bool parallel = false) {
  ProbeResult p;
  p.seconds = seconds;
  p.analysis.forked = forked;
  p.cached = cached;
  p.parallel = parallel;
  return p;
}

TEST(AheadPaysTest, TheCostsAreTheQuickestWarmProbeAgainstTheStart) {
  EXPECT_FALSE(ahead_costs({}, false, 7.0, 0).warm) << "trials that never fork";
  // Before any probe: warm, nothing measured.
  AheadCosts c = ahead_costs({}, true, std::nullopt, 0);
  EXPECT_TRUE(c.warm);
  EXPECT_FALSE(c.warm_probe_seconds.has_value());
  // The first forked probe paid the worker's start (7 s of its 8); cached
  // and ahead probes are not the search's own.
  c = ahead_costs({ran(8.0, true), ran(0.1, true, true), ran(9.0, false, false, true), ran(1.5, true)}, true, 7.0, 2);
  ASSERT_TRUE(c.warm_probe_seconds.has_value());
  EXPECT_DOUBLE_EQ(*c.warm_probe_seconds, 1.0);
  EXPECT_DOUBLE_EQ(*c.start_seconds, 7.0);
  // Another search of the command started the worker: nothing to take off.
  c = ahead_costs({ran(1.5, true), ran(1.2, true)}, true, 7.0, 5);
  EXPECT_DOUBLE_EQ(*c.warm_probe_seconds, 1.2);
  // The warm worker could not serve: the probes start cold, as one ahead.
  EXPECT_FALSE(ahead_costs({ran(9.0, false)}, true, std::nullopt, 0).warm);
}

}  // namespace
}  // namespace dbh::harness::probe
