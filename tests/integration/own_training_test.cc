// The user's own training under dbh (docs/own-training.md): the
// Lightning + Hydra example in examples/lightning-dbnet, started by dbh
// through docs/worker-protocol.md with the adapter in python/, run, repeated
// and bisected through the real binary, as the built-in worker's tests do.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/python_env.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using Dir = testing::ScratchDir;

const std::string kSource = DBH_SOURCE_DIR;
const std::string kExample = kSource + "/examples/lightning-dbnet";
const std::string kScenarios = kExample + "/scenarios";

testing::EnvChanges python_env() { return testing::venv_python_env(); }

testing::ProcessResult dbh(std::vector<std::string> args, double timeout_s = 900) {
  args.insert(args.begin(), DBH_BINARY);
  return testing::run_process_with_env(args, python_env(), kSource, timeout_s);
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// Every file under the example's folder: dbh and the training write nothing there.
std::set<std::string> example_files() {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(kSource + "/examples")) out.insert(e.path().string());
  return out;
}

class OwnTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // ./dev test sets these up; without them the feature is untested, which
    // is a failure to report, not a skip.
    const auto r = testing::run_process_with_env(
        {"/bin/sh", "-c", "python -c 'import torch, lightning, hydra, PIL, dbh_adapter'"}, python_env(), kSource, 120);
    ASSERT_EQ(r.exit_code, 0) << "the example needs .venv with lightning, hydra-core, pillow (./dev setup): " << r.err;
    before_ = example_files();
  }
  void TearDown() override { EXPECT_EQ(example_files(), before_) << "something was written into the example"; }
  std::set<std::string> before_;
};

TEST_F(OwnTrainingTest, RunAttributesANanInTheFusionModuleToItsStepAndModule) {
  const Dir dir("dbh-own-run");
  const auto r = dbh({"run", kScenarios + "/nan-in-fusion.yaml", "--out", (dir / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;  // the expectation (diverged at 3 in decoder.fusion) is met
  const auto j = read_json(dir / "out" / "report.json");
  EXPECT_EQ(j["outcome"], "diverged");
  EXPECT_EQ(j["failure"]["class"], "nonfinite_activation");
  EXPECT_EQ(j["failure"]["step"], 3);
  EXPECT_EQ(j["failure"]["module"], "decoder.fusion");
  // The report speaks of the user's command, not of dbh's model.
  const std::string md = testing::read_text(dir / "out" / "report.md");
  EXPECT_NE(md.find("worker `python train.py"), std::string::npos) << md.substr(0, 3000);
  EXPECT_EQ(md.find("resnet18 + fpn"), std::string::npos);
  // The events came from the adapter: its hello, the fault, the steps.
  const std::string events = testing::read_text(dir / "out" / "main" / "events.jsonl");
  EXPECT_NE(events.find("\"worker\":\"dbh-adapter"), std::string::npos);
  EXPECT_NE(events.find("\"fault_fired\""), std::string::npos);
  // The adapter serves every capability: nothing is run without being checked.
  EXPECT_EQ(r.err.find("does not serve"), std::string::npos) << r.err;
}

TEST_F(OwnTrainingTest, FromCommandExternalRunsTheUsersCommandAsPrinted) {
  const Dir dir("dbh-own-from-command");
  const std::string command = "python " + kExample +
                              "/train.py model.encoder.model_name=tiny dataloaders.train_dataloader.batch_size=2 "
                              "trainer.devices=1 trainer.max_steps=3";
  const fs::path s = dir / "s.yaml";
  auto r = testing::run_process_with_env(
      {DBH_BINARY, "scenario", "from-command", "--external", "--data", kSource + "/fixtures/real", "--data-key",
       "datasets.train.path", command, "--out", s.string()},
      python_env(), dir.string(), 60);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("runs your command under dbh on cpu with " + kSource + "/fixtures/real"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("next:   dbh run " + s.string()), std::string::npos) << r.out;
  const std::string yaml = testing::read_text(s);
  // The keys dbh passes left the command; the others stayed.
  EXPECT_NE(yaml.find("\"model.encoder.model_name=tiny\""), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("\"trainer.max_steps=3\""), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("max_steps: 3"), std::string::npos) << yaml;
  // The printed command runs as pasted, from anywhere.
  r = dbh({"run", s.string(), "--out", (dir / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(read_json(dir / "out" / "report.json")["outcome"], "passed");
  // --data with --external goes to the key of the user's configuration that
  // holds the dataset (a folder relative to its script), found without
  // --data-key: the example hands its composed config to the adapter.
  r = testing::run_process_with_env({DBH_BINARY, "scenario", "from-command", "--external", "--data",
                                     kSource + "/fixtures/real", command},
                                    python_env(), dir.string(), 60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"data.path\":\"datasets.train.path\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"train.lr\":\"model.optimizer.lr\""), std::string::npos) << r.out;
}

TEST_F(OwnTrainingTest, APlainPyTorchLoopIsAttributedToItsStepAndModule) {
  const Dir dir("dbh-own-plain");
  // examples/plain-torch: no Lightning, no Hydra; dbh's keys reach it as
  // argparse flags (worker.keys), the adapter's plain-loop calls do the rest.
  const auto r = dbh({"run", kSource + "/examples/plain-torch/scenarios/nan-in-body.yaml", "--out",
                      (dir / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = read_json(dir / "out" / "report.json");
  EXPECT_EQ(j["failure"]["step"], 5);
  EXPECT_EQ(j["failure"]["module"], "body");
  const std::string events = testing::read_text(dir / "out" / "main" / "events.jsonl");
  EXPECT_NE(events.find("(pytorch, torch"), std::string::npos) << events.substr(0, 600);
  // A flag that did not reach the script is the harness's problem, not a pass.
  const auto off = dbh({"run", kSource + "/examples/plain-torch/scenarios/nan-in-body.yaml", "worker.keys={train.max_steps: \"\"}",
                        "--out", (dir / "off").string()});
  EXPECT_NE(off.exit_code, 0) << off.out;
  EXPECT_EQ(read_json(dir / "off" / "report.json")["outcome"], "unresolved") << off.out << off.err;
}

// A NaN planted in the batch's own target is named where it entered: the
// adapter reads the batch's tensors with the rest of the step's flags, so a
// Lightning and a plain-loop training report `nonfinite_label` (the data), not
// the loss it makes non-finite after; `bisect modules` names the batch's entry.
TEST_F(OwnTrainingTest, ANanInTheBatchsTargetIsNamedAsTheLabelNotTheLoss) {
  const Dir dir("dbh-own-label");
  const std::string plant = "faults=[{name: nan_label, at_step: 2}]";
  const std::string expect = "expect={outcome: diverged, failure_class: nonfinite_label, step: 2, module: \"\"}";
  for (const std::string& scenario : {kScenarios + "/nan-in-fusion.yaml",
                                     kSource + "/examples/plain-torch/scenarios/nan-in-body.yaml"}) {
    const std::string out = (dir / fs::path(scenario).stem()).string();
    const auto r = dbh({"run", scenario, plant, expect, "--out", out});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;  // the expectation: nonfinite_label at step 2
    const auto j = read_json(fs::path(out) / "report.json");
    EXPECT_EQ(j["failure"]["class"], "nonfinite_label") << scenario;
  }
  const auto b = dbh({"bisect", "modules", kSource + "/examples/plain-torch/scenarios/nan-in-body.yaml", plant,
                      expect, "--reproductions", "1", "--out", (dir / "bisect").string(), "--cache",
                      (dir / "cache").string()});
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  const auto j = read_json(dir / "bisect" / "bisect.json");
  EXPECT_EQ(j["result"]["step"], 2) << j.dump(2);
  EXPECT_NE(j["summary"].get<std::string>().find("non-finite label"), std::string::npos) << j["summary"];
  EXPECT_NE(j["summary"].get<std::string>().find("batch['target']"), std::string::npos) << j["summary"];
}

// Note [Loss-scaler skips] for a user's fp16 training, as for dbh's own
// worker: a step whose gradients the scaler finds non-finite is its skip, not
// a divergence (the Lightning example's fp16 trials were all "diverged at step
// 0" on an H200); gradients that stay non-finite are, from the streak's start.
TEST_F(OwnTrainingTest, AnFp16LossScalerSkipIsNotADivergenceButAStreakOfThemIs) {
  const Dir dir("dbh-own-scaler");
  const std::string scenarios = kSource + "/examples/plain-torch/scenarios/";
  const auto once = dbh({"run", scenarios + "fp16-overflow-skipped.yaml", "--out", (dir / "once").string()});
  ASSERT_EQ(once.exit_code, 0) << once.out << once.err;
  const auto report = read_json(dir / "once" / "report.json");
  EXPECT_EQ(report["outcome"], "passed");
  EXPECT_EQ(report["scaler_skipped_steps"], nlohmann::json::array({3})) << report.dump();
  // The pages say so, beside "every health check passing".
  const std::string md = testing::read_text(dir / "once" / "report.md");
  EXPECT_NE(md.find("**Loss scaler (fp16):** skipped 1 of 10 optimizer steps (step 3)"), std::string::npos) << md;
  EXPECT_NE(testing::read_text(dir / "once" / "report.html").find("<th>Loss scaler (fp16)</th>"), std::string::npos);
  // The step is recorded as skipped, at the scale that overflowed, and the
  // next one runs at half of it.
  std::map<int64_t, nlohmann::json> ends;
  int skips = 0;
  std::istringstream events(testing::read_text(dir / "once" / "main" / "events.jsonl"));
  for (std::string line; std::getline(events, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e["type"] == "step_end") ends[e["step"].get<int64_t>()] = e;
    if (e["type"] == "health" && e.value("check", "") == "loss_scaler") {
      ++skips;
      EXPECT_EQ(e["step"], 3) << line;
      EXPECT_EQ(e["skipped_in_a_row"], 1) << line;
      EXPECT_FALSE(e["primary"].get<bool>()) << line;
    }
  }
  EXPECT_EQ(skips, 1);
  ASSERT_EQ(ends.size(), 10u);
  EXPECT_TRUE(ends[3]["skipped"].get<bool>());
  EXPECT_FALSE(ends[2]["skipped"].get<bool>());
  EXPECT_EQ(ends[4]["loss_scale"].get<double>() * 2, ends[3]["loss_scale"].get<double>());

  const auto stays = dbh({"run", scenarios + "fp16-gradients-stay-nan.yaml", "--out", (dir / "stays").string()});
  ASSERT_EQ(stays.exit_code, 0) << stays.out << stays.err;  // its expectation: diverged at step 3
  const auto j = read_json(dir / "stays" / "report.json");
  EXPECT_EQ(j["outcome"], "diverged");
  EXPECT_EQ(j["failure"]["step"], 3);
  EXPECT_NE(j["failure"]["message"].get<std::string>().find("skipped 8 steps in a row"), std::string::npos)
      << j["failure"].dump();
  // Without a scaler (fp32) the same gradients are a divergence at once.
  const auto fp32 = dbh({"run", scenarios + "fp16-overflow-skipped.yaml", "train.precision=fp32", "expect.outcome=diverged",
                         "expect.step=3", "--out", (dir / "fp32").string()});
  EXPECT_EQ(fp32.exit_code, 0) << fp32.out << fp32.err;
}

// A user's CUDA scenario on a machine without an NVIDIA GPU is skipped, as
// dbh's own worker's is (exit 4, a visible skip in a suite), not started
// (Lightning would fail to find a GPU backend: that was exit 2, "expected a
// worker that writes hello").
TEST_F(OwnTrainingTest, ACudaRunOnAMachineWithoutAGpuIsSkippedWithoutStartingIt) {
  if (fs::exists("/proc/driver/nvidia/gpus") || fs::exists("/dev/nvidia0") || fs::exists("/dev/dxg")) {
    GTEST_SKIP() << "this machine shows a GPU";
  }
  const Dir dir("dbh-own-no-gpu");
  const auto r = dbh({"run", kScenarios + "/clean.yaml", "hardware.device=cuda", "--out", (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_EQ(r.err.find("describe mode"), std::string::npos) << r.err;  // not even asked what it serves
  const auto j = read_json(dir / "out" / "report.json");
  EXPECT_EQ(j["outcome"], "skipped");
  const std::string message = j["failure"]["message"];
  EXPECT_NE(message.find("was not started; to run it on this machine's CPU instead, add hardware.device=cpu"),
            std::string::npos)
      << message;
  EXPECT_FALSE(fs::exists(dir / "out" / "main" / "stderr.log") &&
               testing::read_text(dir / "out" / "main" / "stderr.log").find("Trainer") != std::string::npos);
  // In a suite it is a skip, not a failure.
  const auto suite = dbh({"suite", kScenarios + "/clean.yaml", "hardware.device=cuda", "--out", (dir / "suite").string(),
                          "--junit", (dir / "junit.xml").string()});
  EXPECT_EQ(suite.exit_code, 0) << suite.out << suite.err;
  EXPECT_NE(testing::read_text(dir / "junit.xml").find("skipped=\"1\""), std::string::npos)
      << testing::read_text(dir / "junit.xml");
}

TEST_F(OwnTrainingTest, RepeatTwoProcessesIsBitIdentical) {
  const Dir dir("dbh-own-repeat");
  const auto r = dbh({"repeat", kScenarios + "/clean.yaml", "--processes", "2", "--out", (dir / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = read_json(dir / "out" / "report.json");
  EXPECT_EQ(j["outcome"], "passed");
  EXPECT_TRUE(j["determinism"]["checked"].get<bool>());
  EXPECT_TRUE(j["determinism"]["identical"].get<bool>()) << j["determinism"].dump();
  // The parameters' checksum is the adapter's, not empty.
  EXPECT_EQ(j["determinism"]["detail"].get<std::string>().find("(checksum )"), std::string::npos)
      << j["determinism"].dump();
}

TEST_F(OwnTrainingTest, WhatTheWorkerCannotServeIsRefusedBeforeAnythingRuns) {
  const Dir dir("dbh-own-refused");
  struct Case {
    std::vector<std::string> args;
    std::string names;  // the message names this
  };
  const std::string clean = kScenarios + "/clean.yaml";
  for (const Case& c : std::vector<Case>{
           {{"run", clean, "data.source=synthetic_boxes"}, "`synthetic_data`"},
           {{"run", kScenarios + "/nan-in-fusion.yaml", "faults.0.module=decoder.fusin"}, "did you mean \"decoder.fusion\""},
           {{"run", clean, "faults=[{name: loss_scale_overflow}]"}, "`fault:loss_scale_overflow`"},
       }) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--out", (dir / "out").string()});
    const auto r = dbh(args);
    EXPECT_EQ(r.exit_code, 2) << c.names << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.names), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir / "out")) << c.names << ": something was written";
  }
}

TEST_F(OwnTrainingTest, BisectModulesFindsTheStepAndModuleReplayingFromLightningCheckpoints) {
  const Dir dir("dbh-own-modules");
  const auto r = dbh({"bisect", "modules", kScenarios + "/nan-in-fusion.yaml", "--reproductions", "1", "--out",
                      (dir / "out").string(), "--cache", (dir / "cache").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = read_json(dir / "out" / "bisect.json");
  EXPECT_EQ(j["result"]["step"], 3) << j.dump(2);
  EXPECT_EQ(j["result"]["module"], "decoder.fusion");
  EXPECT_EQ(j["result"]["direction"], "forward");
  EXPECT_EQ(j["verdict"], "confident");
  // The replays resumed from the example's own Lightning checkpoints.
  int resumed = 0;
  for (const auto& p : j["probes"]) resumed += p.dump().find("train.resume_from=") != std::string::npos;
  EXPECT_GT(resumed, 0) << j["probes"].dump(2);
  // Note [A warm worker]: every probe forked from the warm worker, and the
  // same answer from processes of their own (--cold).
  EXPECT_EQ(j["forked_probes"], j["fresh_probes"]) << j["probes"].dump(2);
  EXPECT_NE(r.out.find("forked from a warm worker"), std::string::npos) << r.out;
  const auto cold = dbh({"bisect", "modules", kScenarios + "/nan-in-fusion.yaml", "--reproductions", "1", "--cold",
                         "--out", (dir / "cold").string(), "--cache", (dir / "cold-cache").string()});
  ASSERT_EQ(cold.exit_code, 0) << cold.out << cold.err;
  const auto c = read_json(dir / "cold" / "bisect.json");
  EXPECT_EQ(c["forked_probes"], 0);
  for (const char* k : {"step", "module", "direction"}) EXPECT_EQ(c["result"][k], j["result"][k]) << k;
  EXPECT_EQ(c["verdict"], j["verdict"]);
  ASSERT_EQ(c["probes"].size(), j["probes"].size());
  for (size_t i = 0; i < c["probes"].size(); ++i) {
    for (const char* k : {"what", "outcome", "class", "step", "module", "steps_run"}) {
      EXPECT_EQ(c["probes"][i][k], j["probes"][i][k]) << "probe " << i << " " << k;
    }
    EXPECT_EQ(c["probes"][i]["cold_reason"], "--cold");
  }
}

TEST_F(OwnTrainingTest, BisectDataNamesThePlantedBadSampleReadThroughItsDataModule) {
  const Dir dir("dbh-own-data");
  fs::copy(kSource + "/fixtures/real", dir / "data", fs::copy_options::recursive);
  // img_004.png cut to 100 bytes: the example's own reader fails on it.
  const fs::path bad = dir / "data" / "images" / "img_004.png";
  const std::string head = testing::read_text(bad).substr(0, 100);
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << head;
  const auto r = dbh({"bisect", "data", kScenarios + "/clean.yaml", "data.path=" + (dir / "data").string(), "--out",
                      (dir / "out").string(), "--cache", (dir / "cache").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = read_json(dir / "out" / "bisect.json");
  ASSERT_EQ(j["result"]["samples"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["result"]["samples"][0]["name"], "img_004.png");  // the name the data module gave the sample it read
  EXPECT_EQ(j["verdict"], "confident");
}

TEST_F(OwnTrainingTest, BisectConfigNamesTheOneHydraOverrideThatBreaksIt) {
  const Dir dir("dbh-own-config");
  // Three Hydra overrides of the example's own configuration; only the
  // learning rate breaks it (the loss becomes NaN by step 4).
  const auto r = dbh({"bisect", "config", "--good", kScenarios + "/clean.yaml", "--bad",
                      "model.optimizer.lr=1e6 dataloaders.train_dataloader.batch_size=4 seed=7", "--reproductions", "1",
                      "--out", (dir / "out").string(), "--cache", (dir / "cache").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = read_json(dir / "out" / "bisect.json");
  ASSERT_EQ(j["result"]["difference"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["result"]["difference"][0].get<std::string>().rfind("train.lr=", 0), 0u) << j.dump(2);
  // Named as the user's command received it, too.
  ASSERT_EQ(j["result"]["as_passed"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["result"]["as_passed"][0].get<std::string>().rfind("model.optimizer.lr=", 0), 0u) << j.dump(2);
  EXPECT_NE(r.out.find("(your model.optimizer.lr="), std::string::npos) << r.out;  // plain text on the terminal
  EXPECT_EQ(j["result"]["differing_keys"], 3);
}

TEST_F(OwnTrainingTest, QualifyMeasuresTheUsersTrainingUnderAHostBudget) {
  const Dir dir("dbh-own-qualify");
  // 64 images of 512 px do not fit in 1500 MiB with Python, Lightning and
  // torch in the process: the search measures smaller batches under the
  // adapter's budget (RLIMIT_DATA on the CPU, a host-memory estimate whose
  // exact boundary moves with the interpreter's reservations).
  const auto r = dbh({"qualify", kScenarios + "/clean.yaml", "data.batch_size=64", "data.size=512", "--budget",
                      "1500MiB", "--steps", "1", "--out", (dir / "out").string(), "--cache", (dir / "cache").string()});
  ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.out << r.err;
  const auto j = read_json(dir / "out" / "qualification.json");
  EXPECT_FALSE(j["source"]["passed"].get<bool>());
  EXPECT_GE(j["trial_count"].get<int64_t>(), 3);
  // Every trial ran the example under the budget the adapter applied.
  int applied = 0;
  std::string errors;  // what the trials' error events said, for a failure
  for (const auto& e : fs::recursive_directory_iterator(dir / "out")) {
    if (e.path().filename() != "events.jsonl") continue;
    const std::string events = testing::read_text(e.path());
    applied += events.find("\"memory_budget\"") != std::string::npos &&
               events.find("\"method\":\"RLIMIT_DATA\"") != std::string::npos;
    std::istringstream lines(events);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("\"type\":\"error\"") != std::string::npos) errors += line.substr(0, 400) + "\n";
    }
  }
  EXPECT_EQ(j["source"]["class"], "host_oom") << j["source"].dump() << "\n" << errors;
  EXPECT_GE(applied, 1);
}

TEST_F(OwnTrainingTest, DiagnoseMarksWhatTheWorkerCannotServeNotApplicableAndDecidesByTheFirstBatch) {
  const Dir dir("dbh-own-diagnose");
  const auto r = dbh({"diagnose", kScenarios + "/nan-in-fusion.yaml", "--out", (dir / "out").string(), "--cache",
                      (dir / "cache").string(), "-q"});
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;  // the scenario fails, as diagnosed
  const auto j = read_json(dir / "out" / "diagnosis.json");
  const std::string md = testing::read_text(dir / "out" / "diagnosis.md");
  EXPECT_NE(md.find("n/a (the worker does not serve `synthetic_data`)"), std::string::npos) << md;
  // The ops rung runs in the worker's own torch: the device works.
  EXPECT_NE(md.find("| Basic tensor ops on the device | works |"), std::string::npos) << md;
  // Without synthetic data, the first batch repeated (served by the adapter,
  // no code of the example's) separates data from model: it diverges as
  // early, so the data stream is not what breaks it; three decades of
  // learning rate change nothing, so neither is the rate. The model remains.
  EXPECT_NE(md.find("| The first batch, repeated at every step | FAILS: diverged `nonfinite_activation` at step 3 |"),
            std::string::npos) << md;
  EXPECT_EQ(j["conclusion"], "model") << j.dump(2);
  int rates = 0;
  for (const auto& row : j["rows"]) rates += row["group"] == "learning rate";
  EXPECT_EQ(rates, 3) << j["rows"].dump(1);  // the search stops after three unchanged decades
  EXPECT_EQ(j["bisect"]["kind"], "modules");
  EXPECT_EQ(j["bisect"]["verdict"], "confident");
  EXPECT_NE(md.find("in module `decoder.fusion`"), std::string::npos);
}

// --- The second training: examples/pytorch-regions --------------------------------------------------------------
// A plain PyTorch loop with its own JSON config and key names (dataset.root, loader.per_step, optim.step_size,
// run.seed, run.updates, arch.*, objective.*), its own module names (stem, body.<k>, bridge, readout), a loader of
// its own order (last file first) shuffled by its own generator in two worker processes, tuple batches without
// names, and its own loss (docs/own-training.md).

const std::string kRegions = kSource + "/examples/pytorch-regions";

// A copy of the bundled fixtures with `file` cut to half its bytes: PIL raises "image file is truncated" reading it.
fs::path fixtures_with_truncated(const Dir& dir, const std::string& file) {
  fs::copy(kSource + "/fixtures/real", dir / "data", fs::copy_options::recursive);
  const fs::path bad = dir / "data" / "images" / file;
  const std::string bytes = testing::read_text(bad);
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  return dir / "data";
}

// `dbh diagnose SCENARIO` on the fixtures with img_006.jpg truncated, given as the command's data.path.
testing::ProcessResult diagnose_with_a_truncated_image(const Dir& dir, const std::string& scenario) {
  const fs::path data = fixtures_with_truncated(dir, "img_006.jpg");
  return dbh({"diagnose", scenario, "data.path=" + data.string(), "--out", (dir / "out").string(), "--cache",
              (dir / "cache").string(), "-q"});
}

// Note [Samples as the loader reads them]: the broken image is named by the index the user's dataset gives it and
// by the name it reported, after one probe on it alone, without dbh assuming its own order of the folder.
TEST_F(OwnTrainingTest, RegionsBisectDataNamesTheTruncatedImageTheUsersLoaderRead) {
  const Dir dir("dbh-regions-data");
  const fs::path data = fixtures_with_truncated(dir, "img_006.jpg");
  const auto r = dbh({"bisect", "data", kRegions + "/scenarios/clean.yaml", "data.path=" + data.string(), "--out",
                      (dir / "out").string(), "--cache", (dir / "cache").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = read_json(dir / "out" / "bisect.json");
  ASSERT_EQ(j["result"]["samples"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["result"]["samples"][0]["name"], "img_006.jpg") << j.dump(2);
  EXPECT_EQ(j["result"]["samples"][0]["index"], 4);  // the training's own order: img_010 … img_001
  EXPECT_EQ(j["result"]["method"], "the read that raised") << j.dump(2);
  EXPECT_EQ(j["result"]["order"], "as the worker's loader read them");
  EXPECT_EQ(j["verdict"], "confident") << j.dump(2);
  // One probe named it: the first after the reproduction trains on it alone.
  bool alone = false;
  for (const auto& p : j["probes"]) alone = alone || p.dump().find("data.subset=[4]") != std::string::npos;
  EXPECT_TRUE(alone) << j["probes"].dump(2);
}

// Seed 001's ladder with the training's own synthetic samples (dbh.dataset(..., synthetic=)): its synthetic rungs
// run, the full trainer on them passes while its real data fails on a truncated image, so the diagnosis is
// data-dependent, and its follow-up bisection names the image.
TEST_F(OwnTrainingTest, RegionsDiagnoseOfATruncatedImageIsDataDependent) {
  const Dir dir("dbh-regions-diagnose-data");
  const auto r = diagnose_with_a_truncated_image(dir, kRegions + "/scenarios/clean.yaml");
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  const auto j = read_json(dir / "out" / "diagnosis.json");
  EXPECT_EQ(j["conclusion"], "data-dependent") << j.dump(2);
  for (const auto& row : j["rows"]) {
    if (row["check"] == "Full trainer on synthetic data") {
      EXPECT_EQ(row["outcome"], "passed") << row.dump();
    }
  }
  EXPECT_EQ(j["bisect"]["kind"], "data") << j.dump(2);
  EXPECT_NE(testing::read_text(dir / "out" / "diagnosis.md").find("img_006.jpg"), std::string::npos);
}

// The Lightning example serves no synthetic data, so nothing shows the ladder that the data is the difference;
// the dataset given on the command line does (the run without it trains), the first batch repeated fails reading
// too (Note [The first batch, repeated]: the batch's own content, so the data), and the conclusion `data` is
// followed by the sample search (Note [The samples, named]), whose answer is the cause.
TEST_F(OwnTrainingTest, LightningDiagnoseOfATruncatedImageNamesItWithoutSyntheticData) {
  const Dir dir("dbh-lightning-diagnose-data");
  const auto r = diagnose_with_a_truncated_image(dir, kScenarios + "/clean.yaml");
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  const auto j = read_json(dir / "out" / "diagnosis.json");
  EXPECT_EQ(j["conclusion"], "data") << j.dump(2);
  for (const auto& h : j["hypotheses"]) {
    if (h["id"] != "data") continue;
    EXPECT_TRUE(h["refute"].empty()) << h.dump(1);  // the first batch's failure is no evidence against it
  }
  EXPECT_EQ(j["bisect"]["kind"], "data") << j.dump(2);
  EXPECT_EQ(j["bisect"]["verdict"], "confident") << j.dump(2);
  ASSERT_TRUE(j["cause"].is_string()) << j.dump(2);
  EXPECT_NE(j["cause"].get<std::string>().find("img_006.jpg"), std::string::npos) << j["cause"];
  // The repro is the sample alone.
  EXPECT_NE(testing::read_text(dir / "out" / "repro.yaml").find("\"subset\":[5]"), std::string::npos)
      << testing::read_text(dir / "out" / "repro.yaml");
}

// The worker's own stack, not dbh's LibTorch, in the report's Environment.
// One trial is one training process: a launch of several ranks is refused by
// name (the adapter's NotSupported, written as a harness error by the process
// dbh started), never a silent exit of the ranks, and nothing is written.
TEST_F(OwnTrainingTest, ALaunchOfSeveralRanksIsRefusedByName) {
  const Dir dir("dbh-own-ranks");
  const auto r = dbh({"run", kRegions + "/scenarios/clean.yaml", "worker.env={WORLD_SIZE: '2', RANK: '0'}", "--out",
                      (dir / "out").string()});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("the worker refused the trial: dbh runs one training process per trial: a launch of 2 ranks "
                       "(this is rank 0) is not supported yet; run the trial on one device"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST_F(OwnTrainingTest, RegionsReportDescribesTheUsersEnvironment) {
  const Dir dir("dbh-regions-env");
  const auto r = dbh({"run", kRegions + "/scenarios/clean.yaml", "train.max_steps=2", "--out", (dir / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string md = testing::read_text(dir / "out" / "report.md");
  const size_t env = md.find("## Environment");
  ASSERT_NE(env, std::string::npos);
  const std::string section = md.substr(env, md.find("\n## ", env + 5) - env);
  EXPECT_NE(section.find("- Python: 3."), std::string::npos) << section;
  EXPECT_NE(section.find("- torch: 2."), std::string::npos) << section;
  EXPECT_NE(section.find("- Training: dbh-adapter"), std::string::npos) << section;
  EXPECT_EQ(section.find("LibTorch"), std::string::npos) << section;
  EXPECT_EQ(section.find("OpenCV"), std::string::npos) << section;
  const auto j = read_json(dir / "out" / "report.json");
  EXPECT_EQ(j["worker"]["environment"]["device"], "cpu") << j["worker"].dump();
  // The loss parts it does not have are left out, never 0.
  const std::string csv = testing::read_text(dir / "out" / "metrics.csv");
  EXPECT_NE(csv.find("\n0,0,"), std::string::npos) << csv;
  std::istringstream lines(csv);
  std::string header, row;
  std::getline(lines, header);
  std::getline(lines, row);
  EXPECT_NE(row.find(",,,,"), std::string::npos) << "bce, l1, dice empty: " << row;
}

// Note [The user's own names]: --bad in the training's own key names, one of them a key only its config has.
TEST_F(OwnTrainingTest, RegionsBisectConfigSpeaksTheTrainingsOwnKeys) {
  const Dir dir("dbh-regions-config");
  const auto r = dbh({"bisect", "config", "--good", kRegions + "/scenarios/clean.yaml", "--bad",
                      "optim.step_size=50 arch.width=6 objective.dice_weight=0.25 run.seed=5", "--reproductions", "1",
                      "--out", (dir / "out").string(), "--cache", (dir / "cache").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = read_json(dir / "out" / "bisect.json");
  ASSERT_EQ(j["result"]["difference"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["result"]["difference"][0].get<std::string>().rfind("train.lr=50", 0), 0u) << j.dump(2);
  EXPECT_EQ(j["result"]["as_passed"][0].get<std::string>().rfind("optim.step_size=50", 0), 0u) << j.dump(2);
  EXPECT_EQ(j["result"]["differing_keys"], 4);
  // A key only its configuration has is the culprit found in its own name.
  const auto own = dbh({"bisect", "config", "--good", kRegions + "/scenarios/clean.yaml", "--bad",
                        "arch.width=6 objective.edge_weight=1e39", "--reproductions", "1", "--out",
                        (dir / "own").string(), "--cache", (dir / "cache").string()});
  ASSERT_EQ(own.exit_code, 0) << own.out << own.err;
  const auto k = read_json(dir / "own" / "bisect.json");
  ASSERT_EQ(k["result"]["difference"].size(), 1u) << k.dump(2);
  EXPECT_EQ(k["result"]["difference"][0], "objective.edge_weight=1e39") << k.dump(2);
  EXPECT_NE(own.out.find("a key of your own configuration"), std::string::npos) << own.out;
}

// Seed 004 on the user's training: `repeat --in-process 2` fits it twice in one process (dbh.runs()) with a leak of
// 96 MiB a run; the growth is named per run, and the same training without the leak passes.
TEST_F(OwnTrainingTest, RegionsSecondRunLeakIsNamedAsTheMemoryThatGrew) {
  const Dir dir("dbh-regions-leak");
  const auto r = dbh({"repeat", kRegions + "/scenarios/second-run-leak.yaml", "--in-process", "2", "--out",
                      (dir / "out").string()});
  const auto j = read_json(dir / "out" / "report.json");
  EXPECT_EQ(j["outcome"], "leaked") << j["failure"].dump() << r.out << r.err;
  EXPECT_EQ(j["failure"]["class"], "leak_across_runs");
  const std::string message = j["failure"]["message"];
  EXPECT_EQ(message.rfind("resident memory grew by ", 0), 0u) << message;
  EXPECT_NE(message.find("per run over 2 in-process runs"), std::string::npos) << message;
  const auto clean = dbh({"repeat", kRegions + "/scenarios/clean.yaml", "--in-process", "2", "train.max_steps=2",
                          "--out", (dir / "clean").string()});
  EXPECT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  EXPECT_EQ(read_json(dir / "clean" / "report.json")["outcome"], "passed");
}

// Seed 001's ladder on the user's training: a learning rate of 50 in its own key diverges; a tenth of it trains, so
// the diagnosis concludes the optimizer / learning rate, and the knowledge base's "lower the learning rate" is
// confirmed by a run. Batch accumulation, which its training has no key for, is not tried (n/a, said why).
TEST_F(OwnTrainingTest, RegionsDiagnoseOfALearningRateTooLargeConcludesTheOptimizer) {
  const Dir dir("dbh-regions-diagnose");
  const auto r = dbh({"diagnose", kRegions + "/scenarios/clean.yaml", "optim.step_size=50", "--out",
                      (dir / "out").string(), "--cache", (dir / "cache").string(), "-q"});
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;  // the failure, diagnosed
  const auto j = read_json(dir / "out" / "diagnosis.json");
  EXPECT_EQ(j["conclusion"], "optimizer") << j.dump(2);
  bool lower_lr_works = false;
  for (const auto& row : j["rows"]) {
    if (row["check"] == "Learning rate 5 (10× lower)") lower_lr_works = row["outcome"] == "passed";
  }
  EXPECT_TRUE(lower_lr_works) << j["rows"].dump(2);
  bool confirmed = false;
  for (const auto& c : j["resolutions_tried"]) {
    // Note [A measured value over a rule of thumb]: the searched rate, not a tenth.
    confirmed = confirmed || (c["overrides"] == nlohmann::json::array({"train.lr=12.5"}) &&
                              c["verdict"] == "confirmed" && c["measured_by"] == "the learning-rate search");
  }
  EXPECT_TRUE(confirmed) << j["resolutions_tried"].dump(2);
  const std::string md = testing::read_text(dir / "out" / "diagnosis.md");
  EXPECT_NE(md.find("n/a (train.accumulation is not passed to the worker"), std::string::npos) << md;
  EXPECT_NE(md.find("**confirmed**: a run with `train.lr=12.5` (your `optim.step_size=12.5`) (the value the "
                    "learning-rate search found) passed"),
            std::string::npos)
      << md;
  // The printed reproduction runs as pasted: the user's key in the
  // scenario's words (train.lr), and it fails as the diagnosed run did.
  const auto repro = dbh({"run", (dir / "out" / "repro.yaml").string(), "--out", (dir / "repro").string(), "-q"});
  EXPECT_EQ(repro.exit_code, 1) << repro.out << repro.err << testing::read_text(dir / "out" / "repro.yaml");
  EXPECT_EQ(read_json(dir / "repro" / "report.json")["outcome"], "diverged") << repro.out;
}

// `scenario from-command --external` on the second training's own command: its composed configuration (the
// `config` of its hello) says where dbh's keys live, so no worker.keys is written by hand; the scenario runs as
// printed, and its own key names still work as overrides.
TEST_F(OwnTrainingTest, RegionsFromCommandExternalFindsItsOwnKeys) {
  const Dir dir("dbh-regions-from-command");
  const fs::path s = dir / "s.yaml";
  auto r = testing::run_process_with_env({DBH_BINARY, "scenario", "from-command", "--external",
                                          "python train.py optim.step_size=0.02 run.updates=3 arch.width=6", "--out",
                                          s.string()},
                                         python_env(), kRegions, 120);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string yaml = testing::read_text(s);
  for (const char* mapped : {"\"train.lr\":\"optim.step_size\"", "\"data.batch_size\":\"loader.per_step\"",
                             "\"train.max_steps\":\"run.updates\"", "\"data.path\":\"dataset.root\"",
                             "\"train.accumulation\":\"\"", "lr: 0.02", "max_steps: 3", "batch_size: 2"}) {
    EXPECT_NE(yaml.find(mapped), std::string::npos) << mapped << "\n" << yaml;
  }
  EXPECT_NE(yaml.find("\"arch.width=6\""), std::string::npos) << "the user's other words stay\n" << yaml;
  EXPECT_EQ(yaml.find("\"optim.step_size=0.02\""), std::string::npos) << "dbh passes it back\n" << yaml;
  EXPECT_NE(r.err.find("your key: train.lr: optim.step_size (0.02)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unmapped: train.accumulation (no key of your configuration holds it"), std::string::npos)
      << r.err;
  r = dbh({"run", s.string(), "--out", (dir / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = read_json(dir / "out" / "report.json");
  EXPECT_EQ(j["outcome"], "passed");
  EXPECT_EQ(j["steps_completed"], 3);
  r = dbh({"run", s.string(), "optim.step_size=500", "run.updates=6", "--out", (dir / "diverged").string()});
  EXPECT_EQ(read_json(dir / "diverged" / "report.json")["outcome"], "diverged") << r.out << r.err;
}

// Seed 003 on the user's training: its own validation metrics (val/precision, val/recall, val/f1) arrive in `eval`
// events, f1 read as the h-mean; a cutoff above any probability keeps them at zero, named as that symptom with the
// training's own names. The same training validated normally passes and shows its metrics; expect.min_hmean judges
// its F1.
TEST_F(OwnTrainingTest, RegionsValidationMetricsAtZeroAreASilentFailure) {
  const Dir dir("dbh-regions-validation");
  auto r = dbh({"run", kRegions + "/scenarios/validation-zero.yaml", "--out", (dir / "zero").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;  // failed, as the scenario expects
  auto j = read_json(dir / "zero" / "report.json");
  EXPECT_EQ(j["failure"]["class"], "hmean_zero") << j["failure"].dump();
  const std::string message = j["failure"]["message"];
  EXPECT_NE(message.find("validation h-mean stayed 0.000 for the last 3 evaluations (through step 5)"),
            std::string::npos) << message;
  EXPECT_NE(message.find("val/f1 0.000, val/precision 0.000, val/recall 0.000"), std::string::npos) << message;
  const std::string md = testing::read_text(dir / "zero" / "report.md");
  EXPECT_NE(md.find("Validation (the training's own metrics):"), std::string::npos) << md;
  EXPECT_NE(md.find("| step | val/f1 | val/precision | val/recall |"), std::string::npos) << md;
  r = dbh({"run", kRegions + "/scenarios/clean.yaml", "train.eval_every=3", "train.max_steps=6", "--out",
           (dir / "clean").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  j = read_json(dir / "clean" / "report.json");
  ASSERT_EQ(j["evaluation"]["evaluations"].size(), 2u) << j["evaluation"].dump();
  const auto& last = j["evaluation"]["final"];
  EXPECT_EQ(last["step"], 6);
  EXPECT_GT(last["metrics"]["val/f1"].get<double>(), 0.0) << last.dump();
  EXPECT_EQ(last["hmean"], last["metrics"]["val/f1"]);
  r = dbh({"run", kRegions + "/scenarios/clean.yaml", "train.eval_every=3", "train.max_steps=6",
           "expect.min_hmean=0.999", "--out", (dir / "high").string()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("min_hmean: expected at least 0.999, got "), std::string::npos) << r.out;
}

// Note [Updates that change nothing] on the user's training: zero loss weights (its own keys) leave every gradient 0,
// found as not learning in a 4-step run; a learning rate of 0 in its own key name, the same.
TEST_F(OwnTrainingTest, RegionsFrozenLearningIsASilentFailure) {
  const Dir dir("dbh-regions-frozen");
  const auto r = dbh({"run", kRegions + "/scenarios/frozen-learning.yaml", "--out", (dir / "out").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;  // failed, as the scenario expects
  const auto j = read_json(dir / "out" / "report.json");
  EXPECT_EQ(j["failure"]["class"], "not_learning") << j["failure"].dump();
  EXPECT_NE(j["failure"]["message"].get<std::string>().find("every gradient was zero"), std::string::npos)
      << j["failure"].dump();
}

// Note [A numerics reference] on the user's training through the adapter: a
// reference of `scenario` at 5 steps recorded by `dbh repeat --record` (the
// adapter saves the model's state at every step), and a 5 % change planted
// in the training's own module `module` from step 3 on, found there by `dbh
// qualify --reference` from the reference's own state.
void ExpectAPlantedChangeFoundAtItsStepAndModule(const Dir& dir, const std::string& scenario,
                                                 const std::string& module) {
  const fs::path ref = dir / "reference.json";
  const auto rec = dbh({"repeat", scenario, "train.max_steps=5", "--record", ref.string(), "--out",
                        (dir / "rec").string(), "-q"});
  ASSERT_EQ(rec.exit_code, 0) << rec.out << rec.err;
  const auto r = read_json(ref);
  ASSERT_EQ(r["runs"].size(), 3u);
  ASSERT_FALSE(r["runs"][0]["steps"][0]["modules"].empty()) << r.dump().substr(0, 2000);
  EXPECT_EQ(r["state_steps"].size(), 5u) << r.dump().substr(0, 500);
  EXPECT_TRUE(fs::is_regular_file(ref.string() + ".states/state-s0.pt"));
  const auto planted = dbh({"qualify", scenario, "train.max_steps=5",
                            "faults=[{name: perturb_activation, module: " + module +
                                ", at_step: 3, until_step: 100, relative: 0.05}]",
                            "--reference", ref.string(), "--out", (dir / "planted").string(), "--cache",
                            (dir / "cache").string()});
  EXPECT_EQ(planted.exit_code, 1) << planted.out << planted.err;
  const auto j = read_json(dir / "planted" / "qualification.json");
  const auto& d = j["numerics"]["departure"];
  ASSERT_FALSE(d.is_null()) << j["numerics"].dump(2);
  EXPECT_EQ(d["step"], 3);
  EXPECT_EQ(d["module"], module);
  EXPECT_EQ(d["quantity"], "output of " + module);
  EXPECT_TRUE(d["same_state"].get<bool>()) << d.dump();
  EXPECT_EQ(j["numerics"]["replays"], 3);
}

// The plain loop, in its module `bridge`; and another instruction set under
// the user's torch is a harmless difference there.
TEST_F(OwnTrainingTest, RegionsNumericsReferenceFindsAPlantedChangeAtItsStepAndModule) {
  const Dir dir("dbh-own-regions-numerics");
  const std::string clean = kRegions + "/scenarios/clean.yaml";
  ExpectAPlantedChangeFoundAtItsStepAndModule(dir, clean, "bridge");
  testing::EnvChanges env = python_env();
  env["ATEN_CPU_CAPABILITY"] = "default";
  const auto same = testing::run_process_with_env(
      {DBH_BINARY, "qualify", clean, "train.max_steps=5", "--reference", (dir / "reference.json").string(), "--out",
       (dir / "same").string(), "--cache", (dir / "cache").string()},
      env, kSource, 900);
  EXPECT_EQ(same.exit_code, 0) << same.out << same.err;
  EXPECT_EQ(read_json(dir / "same" / "qualification.json")["numerics"]["machines"]["here"]["ATEN_CPU_CAPABILITY"],
            "default");
}

// The Lightning example (its step replays served by the adapter's Lightning
// callback), in its module `decoder.fusion`.
TEST_F(OwnTrainingTest, LightningNumericsReferenceFindsAPlantedChangeAtItsStepAndModule) {
  const Dir dir("dbh-own-lightning-numerics");
  ExpectAPlantedChangeFoundAtItsStepAndModule(dir, kExample + "/scenarios/clean.yaml", "decoder.fusion");
}

}  // namespace
}  // namespace dbh
