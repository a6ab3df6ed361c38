// Note [dbh's keys in your configuration] (harness/scenario/user_config.h):
// dbh's keys found in a training's own composed configuration by name and by
// what they hold, on configurations written here. No process is started.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/scenario/from_command.h"
#include "harness/scenario/user_config.h"
#include "tests/support/files.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;

const scenario::KeyMapping& mapping(const std::vector<scenario::KeyMapping>& all, const std::string& dbh_key) {
  for (const auto& m : all) {
    if (m.dbh_key == dbh_key) return m;
  }
  ADD_FAILURE() << "no mapping for " << dbh_key;
  return all.front();
}

// A plain training's own names: every key it has is found with its value,
// the dataset's relative path read from the command's folder; the keys it
// lacks are passed as nothing, saying why.
TEST(MapUserConfig, FindsATrainingsOwnNamesByWhatTheyHold) {
  const testing::ScratchDir dir("dbh-user-config");
  fs::create_directories(dir.path() / "data" / "train");
  const std::vector<scenario::ConfigEntry> config = {
      {"dataset.root", "data/train"}, {"dataset.side", 64},        {"dataset.workers", 2},
      {"loader.per_step", 2},         {"optim.step_size", 0.05},   {"optim.momentum", 0.9},
      {"optim.clip", 0.0},            {"run.seed", 11},            {"run.updates", 8},
      {"arch.width", 8},              {"objective.dice_weight", 0.5}};
  const auto all = scenario::map_user_config(config, {}, {"/no/such/folder", dir.path().string()});
  EXPECT_EQ(mapping(all, "data.path").user_key, "dataset.root");
  EXPECT_EQ(mapping(all, "data.path").value, fs::absolute(dir.path() / "data" / "train").lexically_normal().string());
  EXPECT_EQ(mapping(all, "data.size").user_key, "dataset.side");
  EXPECT_EQ(mapping(all, "data.num_workers").user_key, "dataset.workers");
  EXPECT_EQ(mapping(all, "data.batch_size").user_key, "loader.per_step");
  EXPECT_EQ(mapping(all, "data.batch_size").value, 2);
  EXPECT_EQ(mapping(all, "train.lr").user_key, "optim.step_size");
  EXPECT_EQ(mapping(all, "train.lr").value, 0.05);
  EXPECT_EQ(mapping(all, "train.grad_clip").user_key, "optim.clip");
  EXPECT_EQ(mapping(all, "train.momentum").user_key, "optim.momentum");
  EXPECT_EQ(mapping(all, "train.seed").user_key, "run.seed");
  EXPECT_EQ(mapping(all, "train.max_steps").user_key, "run.updates");
  for (const char* absent : {"train.accumulation", "train.precision", "hardware.device", "train.weight_decay"}) {
    EXPECT_EQ(mapping(all, absent).user_key, "") << absent;
    EXPECT_EQ(mapping(all, absent).why, "no key of your configuration holds it") << absent;
  }
}

// What a key holds decides as much as its name: a scheduler's integer
// step_size is no learning rate, a folder that does not exist no dataset, a
// precision outside Lightning's values is not passed as Lightning's.
TEST(MapUserConfig, ANameHoldingSomethingElseIsNotMatched) {
  const std::vector<scenario::ConfigEntry> config = {{"scheduler.step_size", 30},
                                           {"data.path", "/no/such/folder/anywhere"},
                                           {"precision", "half"},
                                           {"optimizer.lr", 0.001}};
  const auto all = scenario::map_user_config(config, {}, {"/"});
  EXPECT_EQ(mapping(all, "train.lr").user_key, "optimizer.lr");
  EXPECT_EQ(mapping(all, "data.path").user_key, "");
  EXPECT_NE(mapping(all, "data.path").why.find("data.path holds something else"), std::string::npos);
  EXPECT_EQ(mapping(all, "train.precision").user_key, "");
  const auto lightning = scenario::map_user_config({{"trainer.precision", "16-mixed"}, {"trainer.accelerator", "gpu"}}, {}, {"/"});
  EXPECT_EQ(mapping(lightning, "train.precision").value, "fp16");
  EXPECT_EQ(mapping(lightning, "hardware.device").value, "cuda");
}

// A validation or test section never stands for the training's; among
// several training keys the one the command line sets wins, and with none
// set the candidates are listed and nothing is chosen.
TEST(MapUserConfig, ValidationKeysAreNeverTheTrainingsAndAmbiguityIsSaid) {
  const std::vector<scenario::ConfigEntry> config = {{"datasets.val.batch_size", 8},
                                           {"test_loader.batch_size", 8},
                                           {"datasets.train.batch_size", 2},
                                           {"model.lr", 0.01},
                                           {"head.lr", 0.1}};
  const auto all = scenario::map_user_config(config, {}, {"/"});
  EXPECT_EQ(mapping(all, "data.batch_size").user_key, "datasets.train.batch_size");
  EXPECT_EQ(mapping(all, "train.lr").user_key, "");
  EXPECT_NE(mapping(all, "train.lr").why.find("several keys of your configuration could hold it (model.lr, head.lr)"),
            std::string::npos)
      << mapping(all, "train.lr").why;
  const auto chosen = scenario::map_user_config(config, {"head.lr"}, {"/"});
  EXPECT_EQ(mapping(chosen, "train.lr").user_key, "head.lr");
  EXPECT_EQ(mapping(chosen, "train.lr").value, 0.1);
}

// The conversion with the command's configuration: the words that set a
// mapped key leave the command (dbh passes them back under the same name),
// the scenario holds the configuration's values, worker.keys says where each
// dbh key lives, and the others are listed as passed as nothing.
TEST(MapUserConfig, FromCommandExternalWritesTheMappingIntoTheScenario) {
  scenario::FromCommandOptions o;
  o.external = true;
  o.cwd = "/";
  o.user_config = std::vector<scenario::ConfigEntry>{{"optim.step_size", 0.02}, {"loader.per_step", 2}, {"run.updates", 3},
                                          {"arch.width", 6}};
  const scenario::ConvertedCommand c = scenario::scenario_from_command("python train.py optim.step_size=0.02 arch.width=6", o);
  EXPECT_EQ(c.worker_command, (std::vector<std::string>{"python", "train.py", "arch.width=6"}));
  EXPECT_NE(c.yaml.find("  lr: 0.02  # your configuration's optim.step_size"), std::string::npos) << c.yaml;
  EXPECT_NE(c.yaml.find("  max_steps: 3  # your configuration's run.updates"), std::string::npos) << c.yaml;
  EXPECT_NE(c.yaml.find("\"train.lr\":\"optim.step_size\""), std::string::npos) << c.yaml;
  EXPECT_NE(c.yaml.find("\"train.precision\":\"\""), std::string::npos) << c.yaml;
  EXPECT_NE(std::find(c.mapped.begin(), c.mapped.end(),
                      "data.batch_size: loader.per_step (2), passed as loader.per_step=2"),
            c.mapped.end());
  EXPECT_NE(std::find(c.unmapped.begin(), c.unmapped.end(),
                      "train.seed (no key of your configuration holds it; dbh passes nothing for it)"),
            c.unmapped.end());
}

// Note [A command's own syntax]: an argparse script's keys are its options'
// destinations, reached by their option strings (the long one written), a
// switch as a switch, the dataset folder as the positional word it is; the
// command stays as written and the scenario says how each key is written.
TEST(MapUserConfig, FromCommandExternalPassesArgparseOptionsAsOptions) {
  const testing::ScratchDir dir("dbh-from-argparse");
  fs::create_directories(dir.path() / "imgs");
  using K = scenario::ParserOption::Kind;
  scenario::FromCommandOptions o;
  o.external = true;
  o.cwd = dir.path().string();
  o.parser_options = {{"images", {}, K::kPositional, 1},
                      {"batch_size", {"-b", "--batch-size"}, K::kValue, 1},
                      {"lr", {"--lr"}, K::kValue, 1},
                      {"iters", {"--iters"}, K::kValue, 1},
                      {"shuffle", {"--no-shuffle"}, K::kSwitchOff, 0}};
  o.user_config = std::vector<scenario::ConfigEntry>{
      {"images", "imgs"}, {"batch_size", 4}, {"lr", 0.05}, {"iters", 3}, {"shuffle", true}};
  const auto c = scenario::scenario_from_command("python train.py -b 4 imgs --lr=0.05", o);
  EXPECT_EQ(c.worker_command, (std::vector<std::string>{"python", "train.py", "-b", "4", "imgs", "--lr=0.05"}));
  for (const char* want : {"syntax: flags", "\"batch_size\":\"--batch-size|-b\"", "\"images\":\"@4\"",
                           "\"lr\":\"--lr\"", "\"train.max_steps\":\"iters\""}) {
    EXPECT_NE(c.yaml.find(want), std::string::npos) << want << "\n" << c.yaml;
  }
  EXPECT_NE(std::find(c.mapped.begin(), c.mapped.end(), "train.lr: lr (0.05), passed as --lr 0.05"), c.mapped.end());
  EXPECT_NE(std::find(c.mapped.begin(), c.mapped.end(), "train.max_steps: iters (3), passed as --iters 3"),
            c.mapped.end());
}

// PaddleOCR's `-c FILE -o key=value`: the syntax is the option's, and a key
// only the file holds is passed with `-o` too (the option overrides the file).
TEST(MapUserConfig, FromCommandExternalPassesOptionPairsAfterTheOption) {
  scenario::FromCommandOptions o;
  o.external = true;
  o.cwd = "/";
  o.user_config = std::vector<scenario::ConfigEntry>{};
  o.config_files = {{3, {{"Global.epoch_num", 2}, {"Optimizer.lr.learning_rate", 0.001}, {"Global.seed", 1}}}};
  const auto c = scenario::scenario_from_command("python tools/train.py -c det.yml -o Global.seed=1", o);
  EXPECT_NE(c.yaml.find("syntax: option"), std::string::npos) << c.yaml;
  EXPECT_NE(c.yaml.find("syntax_option: \"-o\""), std::string::npos) << c.yaml;
  EXPECT_NE(std::find(c.mapped.begin(), c.mapped.end(),
                      "train.lr: Optimizer.lr.learning_rate (0.001), passed as -o Optimizer.lr.learning_rate=0.001"),
            c.mapped.end())
      << c.yaml;
}

// A file the command names with no override syntax for its keys (MhLiao/DB's
// experiment): its keys are set in a copy, `@N:key`.
TEST(MapUserConfig, FromCommandExternalSetsAFilesOwnKeysInACopy) {
  using K = scenario::ParserOption::Kind;
  scenario::FromCommandOptions o;
  o.external = true;
  o.cwd = "/";
  o.parser_options = {{"exp", {}, K::kPositional, 1}, {"lr", {"--lr"}, K::kValue, 1}};
  o.user_config = std::vector<scenario::ConfigEntry>{{"exp", "e.yaml"}, {"lr", nullptr}};
  o.config_files = {{2, {{"optimizer.lr", 0.02}, {"train.iterations", 4}}}};
  const auto c = scenario::scenario_from_command("python train.py e.yaml", o);
  EXPECT_NE(c.yaml.find("syntax: file"), std::string::npos) << c.yaml;
  EXPECT_NE(c.yaml.find("syntax_option: \"@2\""), std::string::npos) << c.yaml;
  EXPECT_NE(c.yaml.find("\"lr\":\"--lr\""), std::string::npos) << "the options are the command's\n" << c.yaml;
  EXPECT_EQ(c.yaml.find("\"optimizer.lr\":"), std::string::npos) << "the file's keys need no spelling\n" << c.yaml;
  EXPECT_NE(std::find(c.mapped.begin(), c.mapped.end(),
                      "train.lr: optimizer.lr (0.02), passed as optimizer.lr: 0.02 in a copy of e.yaml"),
            c.mapped.end())
      << c.yaml;
}

}  // namespace
}  // namespace dbh::harness
