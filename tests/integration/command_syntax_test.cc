// Note [A command's own syntax]: trainings of one's own, each written in
// another style than the examples and than each other (their own module
// names, datasets, batch structure, loss), each with only the adapter's
// documented lines, run under dbh through the real binary in the syntax
// their command takes: an argparse script with a positional dataset folder
// and switches; a MhLiao/DB-style positional experiment YAML (tags, an
// anchor) plus flags; a PaddleOCR-style `-c FILE -o key=value`; a
// LightningCLI `fit --config`; a Lightning training composed by Hydra with
// keys of its own. Nothing is ever written into the trainings' folders:
// their config files stay byte-identical.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
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
const std::string kTrainings = kSource + "/tests/integration/trainings";

testing::EnvChanges python_env() { return testing::venv_python_env(); }

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// Every file under the trainings' folder with its bytes.
std::map<std::string, std::string> training_files() {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(kTrainings)) {
    if (e.is_regular_file()) out[e.path().string()] = testing::read_text(e.path());
  }
  return out;
}

struct Style {
  const char* name;
  const char* folder;   // under tests/integration/trainings
  const char* command;  // as its author runs it
  std::vector<const char*> scenario_holds;  // what the generated scenario says of its syntax
  const char* module;   // a module of its own model, for a fault
  const char* bad;      // `bisect config --bad`, in the command's own spelling: a diverging rate and one harmless change
  const char* bad_key;  // the dbh key of the learning rate it sets
  const char* diverging;  // an override of its own learning rate, in its own key, that diverges
  std::vector<const char*> validate;  // its own keys that turn its validation on
  const char* cutoff_too_high;        // its own key and a cutoff above any score: every metric 0
  std::vector<const char*> unseeded;  // its own keys for a shuffled order drawn from a nondeterministic seed
};

void PrintTo(const Style& s, std::ostream* os) { *os << s.name; }

const Style kStyles[] = {
    {"argparse_positional_folder", "argparse_folder",
     "python train.py ../../../../fixtures/real/images --batch-size 2 --iters 6 --no-shuffle",
     {"syntax: flags", "\"images\":\"@2\"", "\"batch_size\":\"--batch-size|-b\"", "\"shuffle\":\"off:--no-shuffle\"",
      "\"data.path\":\"images\""},
     "features", "--lr 1000 --seed 4", "train.lr", "lr=1000", {"val_every=2"},
     "cutoff=1.01", {"shuffle=true", "shuffle_seed=-1"}},
    {"experiment_yaml_and_flags", "experiment_yaml", "python train.py experiments/pixels.yaml --batch_size 2",
     {"syntax: file", "syntax_option: \"@2\"", "\"batch_size\":\"--batch_size\"", "\"train.lr\":\"optimizer.lr\"",
      "\"data.path\":\"train.data_dir\"", "\"data.batch_size\":\"batch_size\""},
     "encoder", "optimizer.lr=1e6 --batch_size 3", "train.lr", "optimizer.lr=1e6",
     {"validation.every=2"}, "validation.cutoff=1.01",
     {"train.shuffle=true", "train.order_seed=-1"}},
    {"config_file_and_option_pairs", "option_pairs", "python train.py -c configs/det.yml -o Global.seed=7",
     {"syntax: option", "syntax_option: \"-o\"", "\"train.lr\":\"Optimizer.lr.learning_rate\""}, "neck",
     "-o Optimizer.lr.learning_rate=1e6 Global.seed=8", "train.lr", "Optimizer.lr.learning_rate=1e5",
     {"Eval.every=2"}, "Eval.cutoff=1000.0",
     {"Train.loader.shuffle=true", "Train.loader.seed=-1"}},
    {"lightning_cli", "lightning_cli", "python train.py fit --config config.yaml --model.lr 0.05",
     {"syntax: flags", "\"train.lr\":\"model.lr\"", "\"train.max_steps\":\"trainer.max_steps\""}, "stem",
     "--model.lr 1e6 --data.batch_size 3", "train.lr", "model.lr=1e5",
     {"trainer.limit_val_batches=1.0", "trainer.val_check_interval=1"}, "model.cutoff=1.01",
     {"data.shuffle=true", "data.order_seed=-1"}},
    {"hydra_key_value", "hydra_lightning", "python train.py optim.step_size=0.05 run.updates=4",
     {"\"train.lr\":\"optim.step_size\"", "\"data.path\":\"loader.folder\"", "command: [\"python\",\"train.py\"]"},
     "trunk", "optim.step_size=10 run.seed=6", "train.lr", "optim.step_size=10", {"run.validate_every=1"},
     "score.threshold=1.01", {"loader.shuffle=true", "loader.order_seed=-1"}},
};

class CommandSyntaxTest : public ::testing::TestWithParam<Style> {
 protected:
  void SetUp() override {
    const auto r = testing::run_process_with_env(
        {"/bin/sh", "-c", "python -c 'import torch, lightning, jsonargparse, yaml, PIL, dbh_adapter'"}, python_env(),
        kSource, 120);
    ASSERT_EQ(r.exit_code, 0) << "the trainings need .venv with lightning, jsonargparse, pillow (./dev setup): "
                              << r.err;
    before_ = training_files();
  }
  void TearDown() override {
    EXPECT_TRUE(training_files() == before_) << "a file of the trainings changed, or one was written beside them";
  }

  std::string folder() const { return kTrainings + "/" + GetParam().folder; }

  testing::ProcessResult dbh(std::vector<std::string> args, double timeout_s = 600) const {
    args.insert(args.begin(), DBH_BINARY);
    return testing::run_process_with_env(args, python_env(), folder(), timeout_s);
  }

  // from-command on the command as its author runs it, from its folder.
  fs::path scenario_of(const Dir& dir) const {
    const fs::path s = dir / "s.yaml";
    const auto r = dbh({"scenario", "from-command", "--external", GetParam().command, "--out", s.string()}, 120);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return s;
  }

  std::map<std::string, std::string> before_;
};

// from-command writes a scenario without hand-written keys that names the
// command's syntax; it runs as written and passes; a NaN planted in one of
// its modules is found at that step and module.
TEST_P(CommandSyntaxTest, RunsInItsOwnSyntaxAndFindsAPlantedNan) {
  const Dir dir("dbh-syntax");
  const fs::path s = scenario_of(dir);
  const std::string yaml = testing::read_text(s);
  for (const char* want : GetParam().scenario_holds) EXPECT_NE(yaml.find(want), std::string::npos) << want << "\n" << yaml;
  EXPECT_EQ(yaml.find("\"data.path\":\"\""), std::string::npos) << "the dataset is found wherever it is given\n" << yaml;
  auto r = dbh({"run", s.string(), "--out", (dir / "run").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = read_json(dir / "run" / "report.json");
  EXPECT_EQ(j["outcome"], "passed");
  EXPECT_GT(j["steps_completed"].get<int>(), 0) << j.dump(2);
  r = dbh({"run", s.string(),
           "faults=[{name: nan_activation, module: " + std::string(GetParam().module) + ", at_step: 2}]", "--out",
           (dir / "nan").string()});
  const auto n = read_json(dir / "nan" / "report.json");
  EXPECT_EQ(n["outcome"], "diverged") << r.out << r.err;
  EXPECT_EQ(n["failure"]["class"], "nonfinite_activation") << n["failure"].dump();
  EXPECT_EQ(n["failure"]["step"], 2) << n["failure"].dump();
  EXPECT_EQ(n["failure"]["module"], GetParam().module) << n["failure"].dump();
}

// A NaN gradient planted on one of its modules is found at its step, in that
// module's parameters; two processes train bit for bit alike.
TEST_P(CommandSyntaxTest, ANanGradientIsFoundAndTwoProcessesAgree) {
  const Dir dir("dbh-syntax-grad");
  const fs::path s = scenario_of(dir);
  auto r = dbh({"run", s.string(),
                "faults=[{name: nan_gradient, module: " + std::string(GetParam().module) + ", at_step: 1}]", "--out",
                (dir / "grad").string()});
  const auto g = read_json(dir / "grad" / "report.json");
  EXPECT_EQ(g["failure"]["class"], "nonfinite_gradient") << g["failure"].dump() << r.out << r.err;
  EXPECT_EQ(g["failure"]["step"], 1) << g["failure"].dump();
  EXPECT_EQ(g["failure"]["module"].get<std::string>().rfind(GetParam().module, 0), 0u) << g["failure"].dump();
  r = dbh({"repeat", s.string(), "--processes", "2", "--out", (dir / "repeat").string()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(read_json(dir / "repeat" / "report.json")["outcome"], "passed");
}

// `bisect config --bad` in the command's own spelling (`--lr 1000`, `-o
// Optimizer.lr.learning_rate=1e6`, `--model.lr 1e6`): the learning rate
// alone is the difference that breaks it.
TEST_P(CommandSyntaxTest, BisectConfigInTheCommandsOwnSpellingNamesTheLearningRate) {
  const Dir dir("dbh-syntax-bisect");
  const fs::path s = scenario_of(dir);
  const auto r = dbh({"bisect", "config", "--good", s.string(), "--bad", GetParam().bad, "--reproductions", "1",
                      "--jobs", "2", "--out", (dir / "out").string(), "--cache", (dir / "cache").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = read_json(dir / "out" / "bisect.json");
  ASSERT_EQ(j["result"]["difference"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["result"]["difference"][0].get<std::string>().rfind(std::string(GetParam().bad_key) + "=", 0), 0u)
      << j.dump(2);
  EXPECT_EQ(j["result"]["differing_keys"], 2) << j.dump(2);
  // Note [Probes ahead of warm ones]: its probes fork warm. On LightningCLI,
  // whose imports (Lightning's) take several times a probe of its few steps,
  // a probe ahead would start cold and pay them again: none runs ahead, and
  // the command says why. (A plain script's start may be shorter than its
  // probes: then probes do run ahead, and the answer is the same.)
  if (std::string(GetParam().name) != "lightning_cli") return;
  for (const auto& p : j["probes"]) {
    if (!p["cached"].get<bool>()) {
      EXPECT_TRUE(p["forked"].get<bool>()) << p.dump();
    }
    EXPECT_FALSE(p["parallel"].get<bool>()) << p.dump();
  }
  EXPECT_NE(r.out.find("  ahead     none started (--jobs 2): "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("would start cold"), std::string::npos) << r.out;
}

// Seed 004 on a script that fits once (none calls dbh.runs()): `repeat
// --in-process 2` runs its __main__ twice in one interpreter; a leak of
// 96 MiB a run is named as the memory that grew, and without it the two runs
// pass.
TEST_P(CommandSyntaxTest, ASecondRunInOneProcessNamesTheMemoryThatGrew) {
  const Dir dir("dbh-syntax-second-run");
  const fs::path s = scenario_of(dir);
  auto r = dbh({"repeat", s.string(), "--in-process", "2", "faults=[{name: leak, bytes: 96MiB}]", "--out",
                (dir / "leak").string()});
  const auto j = read_json(dir / "leak" / "report.json");
  EXPECT_EQ(j["outcome"], "leaked") << j["failure"].dump() << r.out << r.err;
  EXPECT_EQ(j["failure"]["class"], "leak_across_runs");
  EXPECT_EQ(j["failure"]["message"].get<std::string>().rfind("resident memory grew by ", 0), 0u) << j["failure"];
  r = dbh({"repeat", s.string(), "--in-process", "2", "--out", (dir / "clean").string()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto c = read_json(dir / "clean" / "report.json");
  EXPECT_EQ(c["outcome"], "passed") << c.dump(2);
}

// Seed 003 on each training: its own validation, turned on in its own keys,
// reports metrics above zero; with a cutoff above any score they stay at
// zero to the end of the run, a silent failure named by its metrics.
TEST_P(CommandSyntaxTest, ValidationMetricsAtZeroAreASilentFailure) {
  const Dir dir("dbh-syntax-validation");
  const fs::path s = scenario_of(dir);
  std::vector<std::string> args = {"run", s.string(), "monitors.hmean_zero_after=2"};
  args.insert(args.end(), GetParam().validate.begin(), GetParam().validate.end());
  std::vector<std::string> zero = args;
  args.insert(args.end(), {"--out", (dir / "clean").string()});
  auto r = dbh(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto c = read_json(dir / "clean" / "report.json");
  EXPECT_GT(c["evaluation"]["final"]["hmean"].get<double>(), 0.0) << c["evaluation"].dump();
  zero.insert(zero.end(), {GetParam().cutoff_too_high, "--out", (dir / "zero").string()});
  r = dbh(zero);
  const auto j = read_json(dir / "zero" / "report.json");
  EXPECT_EQ(j["outcome"], "failed") << r.out << r.err;
  EXPECT_EQ(j["failure"]["class"], "hmean_zero") << j["failure"].dump();
  EXPECT_NE(j["failure"]["message"].get<std::string>().find("validation h-mean stayed 0.000"), std::string::npos)
      << j["failure"].dump();
}

// The dataset given wherever the command takes it (a positional folder, a
// key of its experiment file, `-o`, `--data.root`), with one truncated
// image: `bisect data` names it, by the name the training's dataset gives.
TEST_P(CommandSyntaxTest, BisectDataNamesTheTruncatedImage) {
  const Dir dir("dbh-syntax-data");
  const fs::path s = scenario_of(dir);
  fs::copy(kSource + "/fixtures/real/images", dir / "images", fs::copy_options::recursive);
  const fs::path bad = dir / "images" / "img_003.png";
  const std::string bytes = testing::read_text(bad);
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  const auto r = dbh({"bisect", "data", s.string(), "data.path=" + (dir / "images").string(), "--out",
                      (dir / "out").string(), "--cache", (dir / "cache").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto j = read_json(dir / "out" / "bisect.json");
  ASSERT_EQ(j["result"]["samples"].size(), 1u) << j.dump(2);
  EXPECT_EQ(j["result"]["samples"][0]["name"], "img_003.png") << j.dump(2);
  EXPECT_EQ(j["verdict"], "confident") << j.dump(2);
}

// A learning rate set far too large in the training's own key: the
// diagnosis concludes the optimizer, a tenth of the rate trains.
TEST_P(CommandSyntaxTest, DiagnoseOfADivergingRateConcludesTheOptimizer) {
  const Dir dir("dbh-syntax-diagnose");
  const fs::path s = scenario_of(dir);
  const auto r = dbh({"diagnose", s.string(), GetParam().diverging, "--out", (dir / "out").string(), "--cache",
                      (dir / "cache").string(), "-q"});
  const auto j = read_json(dir / "out" / "diagnosis.json");
  EXPECT_EQ(j["conclusion"], "optimizer") << j.dump(2) << r.out << r.err;
}

// The argparse training's scenario, from its command in `dir`; empty (and a
// failure) when from-command fails.
fs::path plain_loop_scenario(const Dir& dir) {
  const fs::path s = dir / "s.yaml";
  const auto r = testing::run_process_with_env(
      {DBH_BINARY, "scenario", "from-command", "--external", kStyles[0].command, "--out", s.string()}, python_env(),
      kTrainings + "/argparse_folder", 120);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return r.exit_code == 0 ? s : fs::path();
}

// python/README.md "A plain loop, whole": the argparse training's own
// checkpoint lines serve `bisect steps`, whose replays resume from them.
TEST(PlainLoopTest, BisectStepsReplaysFromThePlainLoopsOwnCheckpoints) {
  const Dir dir("dbh-plain-loop-steps");
  const std::string folder = kTrainings + "/argparse_folder";
  const fs::path s = plain_loop_scenario(dir);
  ASSERT_FALSE(s.empty());
  auto r = testing::run_process_with_env({DBH_BINARY, "bisect", "steps", s.string(),
                                     "faults=[{name: nan_activation, module: pool, at_step: 4}]", "--out",
                                     (dir / "out").string(), "--cache", (dir / "cache").string()},
                                    python_env(), folder, 600);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;  // the step found
  const auto j = read_json(dir / "out" / "bisect.json");
  EXPECT_EQ(j["result"]["step"], 4) << j.dump(2);
  const std::string md = testing::read_text(dir / "out" / "bisect.md");
  EXPECT_NE(md.find("replays resume from checkpoints"), std::string::npos) << md;
  EXPECT_NE(md.find("train.resume_from="), std::string::npos) << md;
}

// `bisect config --bad` naming an option the command's parser does not take
// is bad input, not a finding: refused before any probe runs (exit 2), with
// the options it does take, and nothing written.
TEST(PlainLoopTest, BisectConfigRefusesAnOptionTheParserDoesNotTake) {
  const Dir dir("dbh-plain-loop-nope");
  const std::string folder = kTrainings + "/argparse_folder";
  const fs::path s = plain_loop_scenario(dir);
  ASSERT_FALSE(s.empty());
  const auto r = testing::run_process_with_env({DBH_BINARY, "bisect", "config", "--good", s.string(), "--bad",
                                                "--lr 5 --nope 3", "--out", (dir / "out").string(), "--cache",
                                                (dir / "cache").string()},
                                               python_env(), folder, 300);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("bisect config --bad: expected an option your command's parser takes ("), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--lr"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("got \"--nope\""), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("probe"), std::string::npos) << "no probe runs: " << r.err;
  EXPECT_FALSE(fs::exists(dir / "out" / "bisect.json"));
}

// An order drawn from a nondeterministic seed, asked for in each training's
// own keys (its shuffle on, its order's seed -1): two processes differ,
// while the same training seeded is bit-identical (above).
TEST_P(CommandSyntaxTest, AnUnseededShuffleIsNondeterministicAcrossProcesses) {
  const Dir dir("dbh-syntax-order");
  const fs::path s = scenario_of(dir);
  std::vector<std::string> args = {"repeat", s.string(), "--processes", "2"};
  args.insert(args.end(), GetParam().unseeded.begin(), GetParam().unseeded.end());
  args.insert(args.end(), {"--out", (dir / "out").string()});
  const auto r = dbh(args);
  EXPECT_EQ(read_json(dir / "out" / "report.json")["outcome"], "nondeterministic") << r.out << r.err;
}

INSTANTIATE_TEST_SUITE_P(Styles, CommandSyntaxTest, ::testing::ValuesIn(kStyles),
                         [](const ::testing::TestParamInfo<Style>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace dbh
