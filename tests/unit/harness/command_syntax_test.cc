// Note [A command's own syntax] (harness/scenario/command_syntax.h): dbh's
// keys placed in the user's command in the syntax it takes, and Note [A copy
// of your config file] (config_file.h): keys set in a copy of a YAML or JSON
// file with every other byte kept. Pure functions over words and text; the
// copy's writing on a scratch folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/scenario/command_syntax.h"
#include "harness/scenario/config_file.h"
#include "tests/support/files.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;
using scenario::ArgumentPlace;
using scenario::CommandSyntax;
using scenario::KeyArgument;
using scenario::WorkerConfig;
using Words = std::vector<std::string>;

WorkerConfig worker(Words command, CommandSyntax syntax = CommandSyntax::kKeyValue, std::string option = "") {
  WorkerConfig w;
  w.command = std::move(command);
  w.syntax = syntax;
  w.syntax_option = std::move(option);
  return w;
}

TEST(ArgumentPlace, ReadsEveryFormAndWritesItBack) {
  for (const std::string text : {"--lr", "--batch-size|--batch_size|-b", "on:--amp", "off:--no-shuffle|-S", "@2",
                                 "@1:optimizer.lr"}) {
    std::string why;
    const auto p = scenario::parse_argument_place(text, &why);
    ASSERT_TRUE(p) << text << ": " << why;
    EXPECT_EQ(scenario::to_string(*p), text);
  }
  const auto file = scenario::parse_argument_place("@1:optimizer.lr", nullptr);
  EXPECT_EQ(file->kind, ArgumentPlace::Kind::kFileKey);
  EXPECT_EQ(file->word, 1u);
  EXPECT_EQ(file->file_key, "optimizer.lr");
  EXPECT_EQ(scenario::parse_argument_place("on:--amp", nullptr)->kind, ArgumentPlace::Kind::kSwitchOn);
}

TEST(ArgumentPlace, RefusesWhatIsNoPlaceSayingWhatWasExpected) {
  for (const std::string text : {"", "lr", "--lr=0.1", "--lr|lr", "@", "@x", "@1:", "@1:a b", "on:", "--a b",
                                 "@1234567"}) {
    std::string why;
    EXPECT_FALSE(scenario::parse_argument_place(text, &why)) << text;
    EXPECT_FALSE(why.empty()) << text;
  }
}

TEST(FirstArgument, SkipsTheInterpreterAndTheScript) {
  EXPECT_EQ(scenario::first_argument({"python", "-u", "train.py", "--lr", "1"}), 3u);
  EXPECT_EQ(scenario::first_argument({"uv", "run", "python", "-m", "pkg.train", "x=1"}), 5u);
  EXPECT_EQ(scenario::first_argument({"./train", "--lr", "1"}), 1u);
}

// Hydra: a key the command sets is replaced where it stands (its `+` kept),
// one it does not set is appended once.
TEST(ComposeWorkerArgv, KeyValueWordsAreReplacedWhereTheyStand) {
  const auto w = worker({"python", "train.py", "+optim.lr=0.1", "model=big", "trainer.max_steps=4"});
  const auto a = scenario::compose_worker_argv(w, {{"optim.lr", "0.5"}, {"trainer.max_steps", "6"}, {"seed", "3"}});
  EXPECT_EQ(a.argv, (Words{"python", "train.py", "+optim.lr=0.5", "model=big", "trainer.max_steps=6", "seed=3"}));
}

// argparse: every spelling of the option is found (`--lr 0.1`, `--lr=0.1`,
// `-l 0.1`), the interpreter's own `-u` never; a negative value is joined.
TEST(ComposeWorkerArgv, OptionsAreReplacedInEverySpelling) {
  auto w = worker({"python", "-u", "train.py", "data/", "--lr", "0.1", "--batch_size=4"}, CommandSyntax::kFlags);
  w.written_as = {{"lr", "--lr|-l"}, {"batch_size", "--batch-size|--batch_size|-b"}, {"data", "@3"},
                  {"u", "-u"}};
  auto a = scenario::compose_worker_argv(
      w, {{"lr", "0.5"}, {"batch_size", "2"}, {"data", "/d/train"}, {"seed", "7"}, {"u", "1"}, {"clip", "-1"}});
  EXPECT_EQ(a.argv, (Words{"python", "-u", "train.py", "/d/train", "--lr", "0.5", "--batch_size=2", "--seed", "7",
                           "-u", "1", "--clip=-1"}));
  w.command = {"python", "train.py", "-l", "0.1"};
  w.written_as = {{"lr", "--lr|-l"}};
  a = scenario::compose_worker_argv(w, {{"lr", "0.5"}});
  EXPECT_EQ(a.argv, (Words{"python", "train.py", "-l", "0.5"}));
}

TEST(ComposeWorkerArgv, SwitchesArePresentOrAbsentByTheValue) {
  auto w = worker({"python", "train.py", "--amp", "--lr", "1"}, CommandSyntax::kFlags);
  w.written_as = {{"amp", "on:--amp"}, {"shuffle", "off:--no-shuffle"}};
  EXPECT_EQ(scenario::compose_worker_argv(w, {{"amp", "false"}, {"shuffle", "false"}}).argv,
            (Words{"python", "train.py", "--lr", "1", "--no-shuffle"}));
  EXPECT_EQ(scenario::compose_worker_argv(w, {{"amp", "true"}, {"shuffle", "True"}}).argv,
            (Words{"python", "train.py", "--amp", "--lr", "1"}));
}

// PaddleOCR's `-o a=1 b=2` (argparse keeps the last `-o` only): a key joins
// the option's own words, never a second `-o`.
TEST(ComposeWorkerArgv, OptionPairsJoinTheOptionsWords) {
  const auto w = worker({"python", "tools/train.py", "-c", "det.yml", "-o", "Global.epoch_num=1", "Global.seed=2"},
                        CommandSyntax::kOption, "-o");
  EXPECT_EQ(scenario::compose_worker_argv(w, {{"Global.seed", "5"}, {"Optimizer.lr", "0.01"}}).argv,
            (Words{"python", "tools/train.py", "-c", "det.yml", "-o", "Global.epoch_num=1", "Global.seed=5",
                   "Optimizer.lr=0.01"}));
  // A key added after the group's last word, that word then replaced: both stay.
  EXPECT_EQ(scenario::compose_worker_argv(w, {{"Optimizer.lr", "0.01"}, {"Global.seed", "5"}}).argv,
            (Words{"python", "tools/train.py", "-c", "det.yml", "-o", "Global.epoch_num=1", "Global.seed=5",
                   "Optimizer.lr=0.01"}));
  const auto bare = worker({"python", "train.py", "cfg.py"}, CommandSyntax::kOption, "--cfg-options");
  EXPECT_EQ(scenario::compose_worker_argv(bare, {{"optim.lr", "0.01"}, {"seed", "1"}}).argv,
            (Words{"python", "train.py", "cfg.py", "--cfg-options", "optim.lr=0.01", "seed=1"}));
}

// LightningCLI: `--model.lr 0.1` replaced, a new key appended as an option.
TEST(ComposeWorkerArgv, DottedFlagsForLightningCli) {
  const auto w = worker({"python", "cli.py", "fit", "--config", "c.yaml", "--model.lr", "0.1"}, CommandSyntax::kFlags);
  EXPECT_EQ(scenario::compose_worker_argv(w, {{"model.lr", "0.5"}, {"trainer.max_steps", "6"}}).argv,
            (Words{"python", "cli.py", "fit", "--config", "c.yaml", "--model.lr", "0.5", "--trainer.max_steps", "6"}));
}

TEST(ComposeWorkerArgv, FileKeysAreEditsOfTheWordsFile) {
  auto w = worker({"python", "train.py", "exp.yaml", "--lr", "1"}, CommandSyntax::kFlags);
  w.written_as = {{"optimizer.lr", "@2:optimizer.lr"}, {"train.epochs", "@2:train.epochs"}};
  const auto a = scenario::compose_worker_argv(w, {{"optimizer.lr", "0.5"}, {"train.epochs", "3"}});
  EXPECT_EQ(a.argv, w.command);
  ASSERT_EQ(a.file_edits.size(), 2u);
  EXPECT_EQ(a.file_edits[1].key, "train.epochs");
  ASSERT_EQ(a.file_word_at.size(), 1u);
  EXPECT_EQ(a.file_word_at[0], (std::pair<size_t, size_t>{2, 2}));
}

// `file`: every key not spelled otherwise is the file's, set in a copy.
TEST(ComposeWorkerArgv, FileSyntaxSetsKeysInTheNamedFile) {
  auto w = worker({"python", "train.py", "exp.yaml", "--batch_size", "2"}, CommandSyntax::kFile, "@2");
  w.written_as = {{"batch_size", "--batch_size"}};
  const auto a = scenario::compose_worker_argv(w, {{"batch_size", "3"}, {"optimizer.lr", "0.5"}});
  EXPECT_EQ(a.argv, (Words{"python", "train.py", "exp.yaml", "--batch_size", "3"}));
  ASSERT_EQ(a.file_edits.size(), 1u);
  EXPECT_EQ(a.file_edits[0].word, 2u);
  EXPECT_EQ(a.file_edits[0].key, "optimizer.lr");
  EXPECT_EQ(scenario::describe_argument(w, "optimizer.lr", "0.5"), "optimizer.lr: 0.5 in a copy of exp.yaml");
  EXPECT_EQ(scenario::overrides_from_command_words(w, {"--batch_size", "4", "optimizer.lr=1"}, "here"),
            (Words{"batch_size=4", "optimizer.lr=1"}));
  EXPECT_THROW((void)scenario::overrides_from_command_words(w, {"--lr", "4"}, "here"), UsageError);
}

TEST(DetectSyntax, ReadsTheCommandsWords) {
  EXPECT_EQ(scenario::detect_syntax({"python", "t.py", "a.b=1"}, false).syntax, CommandSyntax::kKeyValue);
  const auto o = scenario::detect_syntax({"python", "t.py", "-c", "x.yml", "-o", "Global.a=1"}, true);
  EXPECT_EQ(o.syntax, CommandSyntax::kOption);
  EXPECT_EQ(o.option, "-o");
  const auto j = scenario::detect_syntax({"python", "t.py", "fit", "--model.lr", "0.1"}, false);
  EXPECT_EQ(j.syntax, CommandSyntax::kFlags);
  EXPECT_TRUE(j.dotted_flags);
  EXPECT_EQ(scenario::detect_syntax({"python", "t.py", "data/", "--lr", "1"}, true).syntax, CommandSyntax::kFlags);
}

TEST(PositionalWords, SkipOptionsAndTheirValues) {
  using K = scenario::ParserOption::Kind;
  const std::vector<scenario::ParserOption> options = {
      {"lr", {"--lr"}, K::kValue, 1}, {"amp", {"--amp"}, K::kSwitchOn, 0}, {"exp", {}, K::kPositional, 1},
      {"data", {}, K::kPositional, 1}};
  const Words command = {"python", "train.py", "--lr", "0.1", "--amp", "e.yaml", "--lr=2", "d/"};
  const auto words = scenario::positional_words(command, options);
  ASSERT_EQ(words.size(), 2u);
  EXPECT_EQ(words[0], (std::pair<std::string, size_t>{"exp", 5}));
  EXPECT_EQ(words[1], (std::pair<std::string, size_t>{"data", 7}));
  EXPECT_EQ(scenario::place_of(options[3], command, options), "@7");
  EXPECT_EQ(scenario::place_of(options[1], command, options), "on:--amp");
  EXPECT_EQ(scenario::place_of({"bs", {"-b", "--batch-size"}, K::kValue, 1}, command, options), "--batch-size|-b");
}

const auto kNoPaths = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };

// Every byte but the values': comments, tags, anchors, order, quoting.
TEST(EditConfigText, ChangesOnlyTheValuesBytes) {
  const std::string text =
      "# experiment\nimport: ['base.yaml']\nbase: &b {lr: 0.007, name: \"x\"}\n"
      "model: !!python/name:structure.Model\noptimizer:\n  lr: 0.007   # tuned\n  momentum: 0.9\n"
      "train:\n  epochs: &e 1200\n  data_dir: 'datasets/ic15'\n  again: *e\n";
  const std::string out = scenario::edit_config_text(
      text, "exp.yaml",
      {{0, "optimizer.lr", "0.5"}, {0, "train.data_dir", "/d/x"}, {0, "train.epochs", "3"}, {0, "base.lr", "1"}},
      kNoPaths);
  EXPECT_EQ(out,
            "# experiment\nimport: ['base.yaml']\nbase: &b {lr: 1, name: \"x\"}\n"
            "model: !!python/name:structure.Model\noptimizer:\n  lr: 0.5   # tuned\n  momentum: 0.9\n"
            "train:\n  epochs: &e 3\n  data_dir: \"/d/x\"\n  again: *e\n");
}

TEST(EditConfigText, JsonStaysJson) {
  const std::string text = "{\n  \"optim\": {\"lr\": 0.1, \"amp\": false},\n  \"data\": \"d\"\n}\n";
  const std::string out = scenario::edit_config_text(
      text, "c.json", {{0, "optim.lr", "0.5"}, {0, "optim.amp", "true"}, {0, "data", "e/f"}}, kNoPaths);
  EXPECT_EQ(out, "{\n  \"optim\": {\"lr\": 0.5, \"amp\": true},\n  \"data\": \"e/f\"\n}\n");
}

TEST(EditConfigText, RefusesAKeyTheFileDoesNotHoldNamingIt) {
  try {
    (void)scenario::edit_config_text("optimizer:\n  lr: 1\n", "exp.yaml", {{0, "optimizer.momentum", "1"}}, kNoPaths);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("exp.yaml: optimizer.momentum: expected a key"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)scenario::edit_config_text("a: !!int 3\n", "t.yaml", {{0, "a", "4"}}, kNoPaths), UsageError);
  EXPECT_THROW((void)scenario::edit_config_text("a: [1, 2\n", "t.yaml", {{0, "a", "4"}}, kNoPaths), UsageError);
}

// The copy lives in the trial folder: a path relative to the file's own
// folder is written absolute; the user's file is unchanged.
TEST(WriteConfigCopy, KeepsTheUsersFileAndItsRelativePaths) {
  const testing::ScratchDir dir("dbh-config-copy");
  fs::create_directories(dir.path() / "exp" / "parts");
  fs::create_directories(dir.path() / "run");
  fs::create_directories(dir.path() / "trial");
  const std::string text = "include: parts/base.yaml\nlr: 0.1\nnote: parts\n";
  { std::ofstream(dir.path() / "exp" / "x.yaml") << text; }
  { std::ofstream(dir.path() / "exp" / "parts" / "base.yaml") << "a: 1\n"; }
  const std::string copy = scenario::write_config_copy("../exp/x.yaml", (dir.path() / "run").string(),
                                                       {{2, "lr", "0.5"}}, (dir.path() / "trial").string());
  EXPECT_EQ(fs::path(copy).filename(), "x.yaml");
  std::ifstream in(copy);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string parts = (dir.path() / "exp" / "parts").lexically_normal().string();
  EXPECT_EQ(written, "include: \"" + parts + "/base.yaml\"\nlr: 0.5\nnote: \"" + parts + "\"\n");
  std::ifstream original(dir.path() / "exp" / "x.yaml");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(original)), std::istreambuf_iterator<char>()), text);
}

TEST(ReadConfigFile, FlattensWithTypes) {
  const testing::ScratchDir dir("dbh-config-read");
  { std::ofstream(dir.path() / "c.yml") << "optim: {lr: 0.1, steps: 4, amp: true}\nname: x\n"; }
  const auto entries = scenario::read_config_file((dir.path() / "c.yml").string());
  ASSERT_TRUE(entries);
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ((*entries)[0].first, "name");
  EXPECT_TRUE((*entries)[1].second.is_boolean());
  EXPECT_TRUE((*entries)[2].second.is_number_float());
  EXPECT_TRUE((*entries)[3].second.is_number_integer());
  EXPECT_FALSE(scenario::read_config_file((dir.path() / "c.txt").string()));
}

}  // namespace
}  // namespace dbh::harness
