// Lightning/Hydra aliases (Note [Lightning aliases]): the table, the override
// parser's translation step, shell word splitting and the from-command
// converter, with the generated scenario loaded by dbh's own loader.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/scenario/aliases.h"
#include "harness/scenario/from_command.h"
#include "harness/scenario/scenario.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;
using Kind = scenario::AliasTranslation::Kind;

scenario::AliasTranslation alias(const std::string& key, const std::string& value) {
  const auto t = scenario::translate_alias(key, value);
  EXPECT_TRUE(t.has_value()) << key << " is no alias";
  return t.value_or(scenario::AliasTranslation{});
}

std::string override_error(const std::string& text) {
  try {
    (void)scenario::translate_override(text);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

std::string convert_error(const std::string& command) {
  try {
    (void)scenario::scenario_from_command(command);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

bool any_starts_with(const std::vector<std::string>& items, const std::string& prefix) {
  return std::any_of(items.begin(), items.end(), [&](const std::string& s) { return s.rfind(prefix, 0) == 0; });
}

TEST(AliasTest, PrecisionMapsLightningsNamesToDbhs) {
  for (const auto& [lightning, dbh] : std::vector<std::pair<std::string, std::string>>{{"32", "fp32"},
                                                                                       {"32-true", "fp32"},
                                                                                       {"16", "fp16"},
                                                                                       {"16-mixed", "fp16"},
                                                                                       {"bf16", "bf16"},
                                                                                       {"bf16-mixed", "bf16"}}) {
    const scenario::AliasTranslation t = alias("trainer.precision", lightning);
    EXPECT_EQ(t.kind, Kind::kMapped) << lightning;
    EXPECT_EQ(t.key, "train.precision");
    EXPECT_EQ(t.value, dbh) << lightning;
  }
  // Hydra removes one pair of quotes.
  EXPECT_EQ(alias("trainer.precision", "\"16-mixed\"").value, "fp16");
  // A valid Lightning precision dbh does not train in, and a value that is none.
  EXPECT_EQ(alias("trainer.precision", "16-true").kind, Kind::kUnmapped);
  EXPECT_EQ(alias("trainer.precision", "64").kind, Kind::kUnmapped);
  EXPECT_EQ(alias("trainer.precision", "15").kind, Kind::kInvalid);
  EXPECT_EQ(alias("trainer.precision", "fp16").kind, Kind::kInvalid);
}

TEST(AliasTest, ModelDataAndTrainerKeys) {
  EXPECT_EQ(alias("model.encoder.model_name", "resnet50").value, "resnet50");
  EXPECT_EQ(alias("model.encoder.model_name", "resnet50").key, "model.encoder");
  EXPECT_EQ(alias("model.encoder.model_name", "mobilenetv3").kind, Kind::kUnmapped);
  EXPECT_EQ(alias("model.component_overrides.decoder.name", "pan_decoder").value, "pan");
  EXPECT_EQ(alias("model.component_overrides.decoder.name", "fpn_decoder").value, "fpn");
  EXPECT_EQ(alias("model.component_overrides.decoder.name", "unet_decoder").kind, Kind::kUnmapped);
  EXPECT_EQ(alias("model/architectures", "dbnet").kind, Kind::kSatisfied);

  EXPECT_EQ(alias("dataloaders.train_dataloader.batch_size", "2").key, "data.batch_size");
  EXPECT_EQ(alias("dataloaders.val_dataloader.batch_size", "4").key, "data.val.batch_size");
  EXPECT_EQ(alias("dataloaders.train_dataloader.batch_size", "0").kind, Kind::kInvalid);
  EXPECT_EQ(alias("dataloaders.train_dataloader.batch_size", "two").kind, Kind::kInvalid);
  EXPECT_EQ(alias("trainer.accumulate_grad_batches", "2").key, "train.accumulation");

  EXPECT_EQ(alias("trainer.max_steps", "10").value, "10");
  EXPECT_EQ(alias("trainer.max_steps", "-1").kind, Kind::kUnmapped);  // Lightning: no limit
  EXPECT_EQ(alias("trainer.max_steps", "0").kind, Kind::kInvalid);
  const scenario::AliasTranslation epochs = alias("trainer.max_epochs", "50");
  EXPECT_EQ(epochs.kind, Kind::kUnmapped);
  EXPECT_TRUE(contains(epochs.reason, "train.max_steps")) << epochs.reason;

  EXPECT_EQ(alias("trainer.devices", "1").kind, Kind::kSatisfied);
  EXPECT_EQ(alias("trainer.devices", "auto").kind, Kind::kSatisfied);
  EXPECT_EQ(alias("trainer.devices", "2").kind, Kind::kUnmapped);
  EXPECT_EQ(alias("trainer.accelerator", "gpu").value, "cuda");
  EXPECT_EQ(alias("trainer.accelerator", "cuda").value, "cuda");
  EXPECT_EQ(alias("trainer.accelerator", "cpu").value, "cpu");
  EXPECT_EQ(alias("trainer.accelerator", "auto").kind, Kind::kUnmapped);
  EXPECT_EQ(alias("trainer.accelerator", "gpus").kind, Kind::kInvalid);
  const scenario::AliasTranslation strategy = alias("trainer.strategy", "auto");
  EXPECT_EQ(strategy.kind, Kind::kUnmapped);
  EXPECT_EQ(strategy.reason, "dbh runs one training process per trial; a launch of several ranks is not supported yet");

  EXPECT_EQ(alias("seed", "42").key, "train.seed");
  EXPECT_EQ(alias("seed_everything", "7").value, "7");
  EXPECT_EQ(alias("seed_everything", "true").kind, Kind::kUnmapped);
  EXPECT_EQ(alias("model.optimizer.lr", "0.001").key, "train.lr");
  EXPECT_EQ(alias("model.optimizer.lr", "-1").kind, Kind::kInvalid);
  EXPECT_EQ(alias("preprocessing.target_size", "[512, 512]").value, "512");
  EXPECT_EQ(alias("preprocessing.target_size", "[512,640]").kind, Kind::kUnmapped);
  EXPECT_EQ(alias("trainer.gradient_clip_val", "5.0").key, "train.grad_clip");
  EXPECT_EQ(alias("exp_name", "a: b").value, "\"a: b\"");  // quoted: never parsed as YAML
}

// What reaches the generated YAML is checked, never passed through: a name
// that is not one line of UTF-8 (nlohmann::json would throw on it: an
// internal error) and a number with leading space (strtod skips it, and a
// newline would reach the YAML) are values the alias does not accept.
TEST(AliasTest, ValuesThatCannotBeWrittenAsTheyAreAreInvalid) {
  EXPECT_EQ(alias("exp_name", "a\xff" "b").kind, Kind::kInvalid);
  EXPECT_EQ(alias("exp_name", "a\tb").kind, Kind::kInvalid);
  EXPECT_EQ(alias("exp_name", std::string(201, 'x')).kind, Kind::kInvalid);
  EXPECT_EQ(alias("exp_name", "ünïcode").kind, Kind::kMapped);
  EXPECT_EQ(alias("trainer.gradient_clip_val", "\n  5").kind, Kind::kInvalid);
  EXPECT_EQ(alias("model.optimizer.lr", " 0.1").kind, Kind::kInvalid);
  EXPECT_EQ(alias("model.optimizer.lr", "1e400").kind, Kind::kInvalid);
  EXPECT_EQ(alias("model.optimizer.lr", "nan").kind, Kind::kInvalid);
  EXPECT_THROW(scenario::translate_override("exp_name=\xff"), ScenarioError);
  scenario::FromCommandOptions o;
  o.name = "a\xff";
  EXPECT_THROW(scenario::scenario_from_command("python t.py", o), UsageError);
  o.name = "";
  o.include = "base-\xff.yaml";
  EXPECT_THROW(scenario::scenario_from_command("python t.py", o), UsageError);
}

TEST(AliasTest, HydraHardwareConfigNamesTheProfileItBeginsWith) {
  const scenario::AliasTranslation t = alias("+hardware", "rtx3060_12gb_i5_16core");
  EXPECT_EQ(t.kind, Kind::kMapped);
  EXPECT_EQ(t.key, "hardware.profile");
  EXPECT_EQ(t.value, "rtx3060-12gb");
  EXPECT_EQ(alias("hardware", "gtx1080_8gb").kind, Kind::kUnmapped);
  // dbh's own hardware section is left alone.
  EXPECT_FALSE(scenario::translate_alias("hardware", "{device: cpu}").has_value());
}

TEST(AliasTest, DbhKeysAreNoAliasesAndUnknownLightningKeysAreUnmapped) {
  for (const char* key : {"train.precision", "model.encoder", "data.batch_size", "faults.0.at_step"}) {
    EXPECT_FALSE(scenario::translate_alias(key, "1").has_value()) << key;
  }
  EXPECT_EQ(alias("trainer.log_every_n_steps", "10").kind, Kind::kUnmapped);
  EXPECT_EQ(alias("dataloaders.train_dataloader.pin_memory", "true").kind, Kind::kUnmapped);
  EXPECT_EQ(alias("callbacks/metadata", "default").kind, Kind::kUnmapped);
}

// Every alias names a key dbh's resolved scenario has.
TEST(AliasTest, EveryDbhKeyOfTheTableIsAScenarioKey) {
  const nlohmann::json resolved = nlohmann::json::parse(scenario::resolved_json(scenario::Scenario{}));
  for (const auto& doc : scenario::alias_docs()) {
    if (doc.dbh_key.empty()) continue;
    const nlohmann::json* at = &resolved;
    std::stringstream parts(doc.dbh_key);
    for (std::string part; std::getline(parts, part, '.');) {
      ASSERT_TRUE(at->is_object() && at->contains(part)) << doc.alias << " -> " << doc.dbh_key;
      at = &(*at)[part];
    }
  }
}

TEST(TranslateOverrideTest, AliasesBecomeDbhOverridesAndOthersPassUnchanged) {
  EXPECT_EQ(scenario::translate_override("trainer.precision=16-mixed"), "train.precision=fp16");
  EXPECT_EQ(scenario::translate_override("dataloaders.train_dataloader.batch_size=4"), "data.batch_size=4");
  EXPECT_EQ(scenario::translate_override("+hardware=rtx3060_12gb_i5_16core"), "hardware.profile=rtx3060-12gb");
  EXPECT_EQ(scenario::translate_override("trainer.devices=1"), std::nullopt);  // dbh already trains on one device
  EXPECT_EQ(scenario::translate_override("train.precision=fp16"), "train.precision=fp16");
  EXPECT_EQ(scenario::translate_override("++train.lr=0.1"), "train.lr=0.1");
  EXPECT_EQ(scenario::translate_override("faults.0.at_step=3"), "faults.0.at_step=3");
  EXPECT_EQ(scenario::translate_override("no-equals-sign"), "no-equals-sign");  // apply_override names it
}

TEST(TranslateOverrideTest, AnAliasThatCannotBeMappedNamesTheOverrideTheAliasAndTheExpectedValues) {
  const std::string bad = override_error("trainer.precision=17-mixed");
  EXPECT_TRUE(contains(bad, "<override> trainer.precision=17-mixed: ")) << bad;
  EXPECT_TRUE(contains(bad,
                       "trainer.precision (dbh's train.precision): expected 32, 32-true, 16, 16-mixed, "
                       "bf16 or bf16-mixed, got \"17-mixed\""))
      << bad;
  const std::string strategy = override_error("trainer.strategy=ddp");
  EXPECT_TRUE(contains(strategy, "<override> trainer.strategy=ddp: trainer.strategy: ")) << strategy;
  EXPECT_TRUE(contains(strategy, "a launch of several ranks is not supported yet")) << strategy;
  EXPECT_TRUE(contains(override_error("trainer.max_epochs=3"), "set train.max_steps"));
}

// A fresh folder per test for scenario files.
class AliasScenarioTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::path(::testing::TempDir()) / "dbh-aliases-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  fs::path dir_;
};

TEST_F(AliasScenarioTest, OverridesTakeAliasesAsTheirDbhKeys) {
  const std::string file = write("s.yaml", "name: s\ntrain:\n  max_steps: 4\n");
  const scenario::Scenario s =
      scenario::load_scenario(file, {"trainer.accelerator=gpu", "trainer.precision=16-mixed", "model.encoder.model_name=resnet34",
                           "trainer.devices=1", "model.component_overrides.decoder.name=pan_decoder",
                           "trainer.accumulate_grad_batches=3", "seed=7", "trainer.max_steps=9"});
  EXPECT_EQ(s.hardware.device, "cuda");
  EXPECT_EQ(s.train.precision, model::Precision::kFp16);
  EXPECT_EQ(s.model.encoder, 34);
  EXPECT_EQ(s.model.decoder, model::DecoderKind::kPan);
  EXPECT_EQ(s.train.accumulation, 3);
  EXPECT_EQ(s.train.seed, 7u);
  EXPECT_EQ(s.train.max_steps, 9);
  // The overrides are kept as written, for the reproduce command.
  EXPECT_EQ(s.overrides.front(), "trainer.accelerator=gpu");
}

TEST_F(AliasScenarioTest, ALaterErrorNamesTheOverrideAsTheUserWroteIt) {
  const std::string file = write("s.yaml", "name: s\n");
  try {
    (void)scenario::load_scenario(file, {"dataloaders.train_dataloader.batch_size=5000"});
    FAIL() << "no error";
  } catch (const ScenarioError& e) {
    EXPECT_TRUE(contains(e.what(),
                         "<override> dataloaders.train_dataloader.batch_size=5000: data.batch_size: "
                         "expected an integer in [1, 4096], got \"5000\""))
        << e.what();
  }
}

TEST_F(AliasScenarioTest, ControlsMayUseAliases) {
  const std::string file =
      write("s.yaml",
            "name: s\ndata:\n  batch_size: 4\ncontrols:\n  - [dataloaders.train_dataloader.batch_size=2, "
            "trainer.accumulate_grad_batches=2]\n  - [trainer.precision=bogus]\n");
  try {
    (void)scenario::load_scenario(file);
    FAIL() << "no error";
  } catch (const ScenarioError& e) {
    // The first control is valid; the second names its bad alias.
    EXPECT_TRUE(contains(e.what(), "controls[1]: <override> trainer.precision=bogus")) << e.what();
  }
}

TEST(SplitShellWordsTest, QuotesEscapesContinuationsAndComments) {
  const auto words = scenario::split_shell_words(
      "uv run python runners/train.py \\\n  exp_name='a b' \\\r\n  x=\"c \\\"d\\\" \\$\" y=e\\ f # a comment\n");
  std::vector<std::string> texts;
  for (const auto& w : words)
    texts.push_back(w.text);
  EXPECT_EQ(texts, (std::vector<std::string>{"uv", "run", "python", "runners/train.py", "exp_name=a b", "x=c \"d\" $",
                                             "y=e f"}))
      << ::testing::PrintToString(texts);
  EXPECT_EQ(words[4].line, 2);
  EXPECT_EQ(words[4].column, 3);
  // A comment line inside a continued command ends it, as in the shell.
  EXPECT_EQ(scenario::split_shell_words("a=1 \\\n  # ... other args\n").size(), 1u);
}

TEST(SplitShellWordsTest, WhatAShellWouldRejectOrExpandIsAnErrorWithItsPlace) {
  auto error = [](const std::string& text) {
    try {
      (void)scenario::split_shell_words(text);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_TRUE(contains(error("python t.py 'a=1"),
                       "unbalanced quote: expected a closing ' for the quote opened at "
                       "line 1, column 13"));
  EXPECT_TRUE(contains(error("python t.py \\\n a=\"1"), "closing \" for the quote opened at line 2, column 4"));
  EXPECT_TRUE(contains(error("python t.py a=1 \\"), "expected a character after the backslash"));
  EXPECT_TRUE(contains(error("python t.py a=1 | tee log"), "got the shell operator '|' at line 1, column 17"));
  EXPECT_TRUE(contains(error("python t.py a=$HOME"), "got the shell expansion '$'"));
}

constexpr const char* kSeed000 =
    "python runners/train.py model.encoder.model_name=resnet18 dataloaders.train_dataloader.batch_size=2 "
    "trainer.devices=1 trainer.strategy=auto trainer.max_steps=10";

TEST(FromCommandTest, MapsWhatItCanAndListsEverythingElseWithItsReason) {
  const scenario::ConvertedCommand c = scenario::scenario_from_command(kSeed000);
  EXPECT_EQ(c.program, (std::vector<std::string>{"python", "runners/train.py"}));
  EXPECT_EQ(c.unmapped, (std::vector<std::string>{
                            "trainer.strategy=auto (dbh runs one training process per trial; a launch of "
                            "several ranks is not supported yet)"}));
  EXPECT_EQ(c.satisfied.size(), 1u);
  EXPECT_TRUE(any_starts_with(c.satisfied, "trainer.devices=1 ("));
  for (const char* line : {"  encoder: resnet18  # model.encoder.model_name=resnet18\n",
                           "  batch_size: 2  # dataloaders.train_dataloader.batch_size=2\n",
                           "  max_steps: 10  # trainer.max_steps=10\n", "  device: cuda  # ",
                           "#   trainer.strategy=auto (dbh runs one training process per trial; a launch of "
                           "several ranks is not supported yet)\n",
                           "name: from-command\n"}) {
    EXPECT_TRUE(contains(c.yaml, line)) << line << "\n" << c.yaml;
  }
}

TEST(FromCommandTest, ProgramForms) {
  EXPECT_EQ(scenario::scenario_from_command("python -m runners.train seed=3").program,
            (std::vector<std::string>{"python", "-m", "runners.train"}));
  EXPECT_TRUE(scenario::scenario_from_command("seed=3 trainer.precision=bf16").program.empty());  // the overrides alone
  const scenario::ConvertedCommand env = scenario::scenario_from_command(
      "CUDA_LAUNCH_BLOCKING=1 HYDRA_FULL_ERROR=1 uv run --no-sync python -u runners/train.py --config-name "
      "train -m seed=1");
  EXPECT_EQ(env.program, (std::vector<std::string>{"uv", "run", "--no-sync", "python", "-u", "runners/train.py"}));
  EXPECT_TRUE(contains(env.yaml, "  launch_blocking: true  # CUDA_LAUNCH_BLOCKING=1\n")) << env.yaml;
  EXPECT_TRUE(any_starts_with(env.unmapped, "HYDRA_FULL_ERROR=1 ("));
  EXPECT_TRUE(any_starts_with(env.unmapped, "--config-name train ("));
  EXPECT_TRUE(any_starts_with(env.unmapped, "-m ("));
}

TEST(FromCommandTest, BadInputIsAUsageErrorThatNamesIt) {
  EXPECT_TRUE(contains(convert_error("  \\\n  "), "got an empty command"));
  EXPECT_TRUE(contains(convert_error("python t.py trainer.precision=16-mixd"),
                       "trainer.precision=16-mixd: trainer.precision (dbh's train.precision): expected 32, 32-true, "
                       "16, 16-mixed, bf16 or bf16-mixed, got \"16-mixd\""));
  EXPECT_TRUE(contains(convert_error("python t.py seed=1 seed=2"),
                       "seed=1 and seed=2: expected one value for "
                       "train.seed"));
  EXPECT_TRUE(contains(convert_error("torchrun --nproc_per_node 2 x=1"), "expected the training program"));
}

TEST_F(AliasScenarioTest, TheGeneratedScenarioLoadsWithTheMappedValues) {
  const scenario::ConvertedCommand c = scenario::scenario_from_command(
      "uv run python runners/train.py \\\n"
      "  +hardware=rtx3060_12gb_i5_16core \\\n"
      "  exp_name=ocr_training-dbnet-resnet50-fp16 \\\n"
      "  model/architectures=dbnet \\\n"
      "  model.encoder.model_name=resnet50 \\\n"
      "  model.component_overrides.decoder.name=pan_decoder \\\n"
      "  dataloaders.train_dataloader.batch_size=2 \\\n"
      "  dataloaders.val_dataloader.batch_size=2 \\\n"
      "  trainer.accumulate_grad_batches=2 \\\n"
      "  trainer.precision=16-mixed \\\n"
      "  trainer.max_epochs=50 \\\n"
      "  preprocessing.target_size=[512,512] \\\n"
      "  seed=42");
  EXPECT_TRUE(any_starts_with(c.unmapped, "trainer.max_epochs=50 (dbh counts optimizer steps"));
  EXPECT_TRUE(contains(c.yaml, "#   trainer.max_epochs=50 (")) << c.yaml;
  const scenario::Scenario s = scenario::load_scenario(write("g.yaml", c.yaml));
  EXPECT_EQ(s.name, "ocr_training-dbnet-resnet50-fp16");
  EXPECT_EQ(s.model.encoder, 50);
  EXPECT_EQ(s.model.decoder, model::DecoderKind::kPan);
  EXPECT_EQ(s.data.batch_size, 2);
  EXPECT_EQ(s.data.val.batch_size, 2);
  EXPECT_EQ(s.data.size, 512);
  EXPECT_EQ(s.train.accumulation, 2);
  EXPECT_EQ(s.train.precision, model::Precision::kFp16);
  EXPECT_EQ(s.train.seed, 42u);
  EXPECT_EQ(s.hardware.device, "cuda");
  EXPECT_EQ(s.hardware.profile, "rtx3060-12gb");
  EXPECT_EQ(s.train.max_steps, scenario::TrainConfig{}.max_steps);  // epochs are not steps
}

TEST_F(AliasScenarioTest, ABaseIsIncludedAndNameWinsOverExpName) {
  write("base.yaml", "data:\n  size: 64\nhardware:\n  device: cpu\ntrain:\n  max_steps: 2\n");
  scenario::FromCommandOptions o;
  o.name = "mine";
  o.include = "base.yaml";
  const scenario::ConvertedCommand c =
      scenario::scenario_from_command("python t.py exp_name=theirs trainer.max_steps=3 trainer.accelerator=auto", o);
  EXPECT_TRUE(any_starts_with(c.unmapped, "exp_name=theirs (--name mine"));
  EXPECT_TRUE(any_starts_with(c.unmapped, "trainer.accelerator=auto ("));
  const scenario::Scenario s = scenario::load_scenario(write("g.yaml", c.yaml));
  EXPECT_EQ(s.name, "mine");
  EXPECT_EQ(s.data.size, 64);
  EXPECT_EQ(s.hardware.device, "cpu");  // the base's: auto names no device
  EXPECT_EQ(s.train.max_steps, 3);      // the command's
}

}  // namespace
}  // namespace dbh::harness
