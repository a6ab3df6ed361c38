// `dbh scenario from-command` through the real binary: the seed reports'
// Lightning/Hydra training commands (copied from the reports, since they are
// not in this repository) become scenarios that dbh runs on the CPU with
// cheap overrides, with the mapped values in the resolved scenario; Lightning
// keys as `dbh run` overrides; and bad input (exit 2, named).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/scenario/from_command.h"
#include "harness/scenario/scenario.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/subprocess.h"

namespace dbh {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::fresh_dir;
using testing::read_text;
using testing::RemoveOnExit;
using testing::write_text;

testing::ProcessResult dbh(std::vector<std::string> args, double timeout_s = 300) {
  args.insert(args.begin(), DBH_BINARY);
  return testing::run_process(args, DBH_SOURCE_DIR, timeout_s);
}

// Seed 000 (cuDNN execution failure): "Steps to Reproduce".
constexpr const char* kSeed000 =
    "python runners/train.py model.encoder.model_name=resnet18 dataloaders.train_dataloader.batch_size=2 "
    "trainer.devices=1 trainer.strategy=auto trainer.max_steps=10";

// Seed 003 (cuDNN workspace exhaustion): "If successful, use production config".
constexpr const char* kSeed003Production =
    "uv run python runners/train.py \\\n"
    "  +hardware=rtx3060_12gb_i5_16core \\\n"
    "  exp_name=ocr_training-dbnet-resnet50-batch2 \\\n"
    "  model/architectures=dbnet \\\n"
    "  model.encoder.model_name=resnet50 \\\n"
    "  model.component_overrides.decoder.name=pan_decoder \\\n"
    "  dataloaders.train_dataloader.batch_size=2 \\\n"
    "  dataloaders.val_dataloader.batch_size=2 \\\n"
    "  trainer.accumulate_grad_batches=2 \\\n"
    "  trainer.max_epochs=50 \\\n"
    "  trainer.precision=32 \\\n"
    "  seed=42";

// Seed 003: "Alternative: FP16 + Batch Size 2".
constexpr const char* kSeed003Fp16 =
    "uv run python runners/train.py \\\n"
    "  +hardware=rtx3060_12gb_i5_16core \\\n"
    "  exp_name=ocr_training-dbnet-resnet50-fp16 \\\n"
    "  model/architectures=dbnet \\\n"
    "  dataloaders.train_dataloader.batch_size=2 \\\n"
    "  trainer.precision=16-mixed \\\n"
    "  trainer.max_epochs=50";

constexpr const char* kEpochsUnmapped = "unmapped: trainer.max_epochs=50 (dbh counts optimizer steps, not epochs";

// Cheap CPU settings for a generated scenario; Lightning keys work as well.
const std::vector<std::string> kCheap = {"hardware.device=cpu", "data.size=64", "trainer.max_steps=1",
                                         "train.threads=2"};

// The comment block the generated file opens with.
std::string header(const std::string& yaml) {
  std::string out;
  size_t pos = 0;
  while (pos < yaml.size() && yaml[pos] == '#') {
    const size_t end = yaml.find('\n', pos);
    out += yaml.substr(pos, end - pos + 1);
    pos = end + 1;
  }
  return out;
}

struct Converted {
  fs::path file;
  testing::ProcessResult result;
};

Converted convert(const fs::path& dir, const std::string& command, std::vector<std::string> extra = {}) {
  Converted c;
  c.file = dir / "scenario.yaml";
  std::vector<std::string> args = {"scenario", "from-command", command, "--out", c.file.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  c.result = dbh(args);
  return c;
}

// Runs `file` with the cheap settings (and `extra`) and returns report.json.
json run_cheaply(const fs::path& file, const fs::path& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"run", file.string()};
  args.insert(args.end(), kCheap.begin(), kCheap.end());
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--out", out.string(), "-q"});
  const auto r = dbh(args, 600);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string text = read_text(out / "report.json");
  EXPECT_FALSE(text.empty()) << "no report.json in " << out << "\n" << r.out << r.err;
  return text.empty() ? json::object() : json::parse(text);
}

TEST(FromCommandCliTest, Seed000ConvertsListsTheStrategyAndRuns) {
  const fs::path dir = fresh_dir("dbh-from-command-000");
  RemoveOnExit cleanup(dir);
  const Converted c = convert(dir, kSeed000);
  ASSERT_EQ(c.result.exit_code, 0) << c.result.out << c.result.err;
  const std::string unmapped =
      "trainer.strategy=auto (dbh runs one training process per trial; a launch of several ranks is not supported yet)";
  EXPECT_NE(c.result.err.find("unmapped: " + unmapped + "\n"), std::string::npos) << c.result.err;
  const std::string yaml = read_text(c.file);
  EXPECT_NE(header(yaml).find("#   " + unmapped + "\n"), std::string::npos) << yaml;

  const json report = run_cheaply(c.file, dir / "out");
  EXPECT_EQ(report.value("outcome", ""), "passed");
  const json& r = report["scenario"]["resolved"];
  EXPECT_EQ(r["model"]["encoder"], "resnet18");
  EXPECT_EQ(r["data"]["batch_size"], 2);
  EXPECT_EQ(r["train"]["max_steps"], 1);  // trainer.max_steps=1 overrides the command's 10
  EXPECT_EQ(r["hardware"]["device"], "cpu");
  // Without the cheap override, the command's values stand.
  const harness::scenario::Scenario s = harness::scenario::load_scenario(c.file.string());
  EXPECT_EQ(s.train.max_steps, 10);
  EXPECT_EQ(s.hardware.device, "cuda");  // Lightning's accelerator auto trains on the GPU
}

// The next command runs here as printed: on a machine without a GPU, the
// scenario of a GPU training (Lightning's auto) is followed by the command
// that runs it on the CPU, pasted into a shell from another folder; the
// dataset the command names and --data gives is mapped, not "unknown".
TEST(FromCommandCliTest, TheNextCommandRunsAsPastedOnThisMachine) {
  std::error_code ec;
  if (fs::directory_iterator("/proc/driver/nvidia/gpus", ec) != fs::directory_iterator() && !ec) {
    GTEST_SKIP() << "this machine has an NVIDIA GPU: the scenario runs as written";
  }
  const fs::path dir = fresh_dir("dbh-from-command-next");
  RemoveOnExit cleanup(dir);
  const std::string data = std::string(DBH_SOURCE_DIR) + "/fixtures/real";
  const auto r = testing::run_process({DBH_BINARY, "scenario", "from-command",
                                       "python train.py trainer.max_steps=2 data.size=64 datasets.train.path=" + data,
                                       "--data", data, "--out", "s.yaml"},
                                      dir.string(), 60);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("datasets.train.path=" + data + " (the same folder as --data: data.path below)"),
            std::string::npos) << r.err;
  const std::string yaml = read_text(dir / "s.yaml");
  EXPECT_EQ(yaml.find("data.source synthetic_boxes"), std::string::npos) << "a stale default: " << yaml;
  const size_t at = r.out.find("next:   ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string next = r.out.substr(at + 8, r.out.find('\n', at) - at - 8);
  EXPECT_NE(next.find((dir / "s.yaml").string() + " hardware.device=cpu"), std::string::npos) << next;
  const auto ran = testing::run_process({"/bin/sh", "-c", next + " -q --out " + (dir / "out").string()}, "/", 300);
  EXPECT_EQ(ran.exit_code, 0) << next << "\n" << ran.out << ran.err;
}

TEST(FromCommandCliTest, Seed003ProductionConfigMapsModelBatchesAccumulationProfileAndSeed) {
  const fs::path dir = fresh_dir("dbh-from-command-003");
  RemoveOnExit cleanup(dir);
  const Converted c = convert(dir, kSeed003Production);
  ASSERT_EQ(c.result.exit_code, 0) << c.result.out << c.result.err;
  EXPECT_NE(c.result.err.find(kEpochsUnmapped), std::string::npos) << c.result.err;
  EXPECT_NE(header(read_text(c.file)).find("#   trainer.max_epochs=50 ("), std::string::npos);

  const json report = run_cheaply(c.file, dir / "out");
  EXPECT_EQ(report.value("outcome", ""), "passed");
  const json& r = report["scenario"]["resolved"];
  EXPECT_EQ(r["name"], "ocr_training-dbnet-resnet50-batch2");
  EXPECT_EQ(r["model"]["encoder"], "resnet50");
  EXPECT_EQ(r["model"]["decoder"], "pan");
  EXPECT_EQ(r["data"]["batch_size"], 2);
  EXPECT_EQ(r["data"]["val"]["batch_size"], 2);
  EXPECT_EQ(r["train"]["accumulation"], 2);
  EXPECT_EQ(r["train"]["precision"], "fp32");
  EXPECT_EQ(r["train"]["seed"], 42);
  EXPECT_EQ(r["hardware"]["profile"], "rtx3060-12gb");
  EXPECT_EQ(r["hardware"]["memory_budget"], std::to_string(int64_t{12} << 30));
}

TEST(FromCommandCliTest, Seed003Fp16MapsSixteenMixedAndRunsInFp32OnTheCpu) {
  const fs::path dir = fresh_dir("dbh-from-command-003-fp16");
  RemoveOnExit cleanup(dir);
  const Converted c = convert(dir, kSeed003Fp16);
  ASSERT_EQ(c.result.exit_code, 0) << c.result.out << c.result.err;
  EXPECT_NE(c.result.err.find(kEpochsUnmapped), std::string::npos) << c.result.err;
  const harness::scenario::Scenario s = harness::scenario::load_scenario(c.file.string());
  EXPECT_EQ(s.train.precision, model::Precision::kFp16);
  EXPECT_EQ(s.hardware.device, "cuda");
  EXPECT_EQ(s.hardware.profile, "rtx3060-12gb");

  // AMP runs on CUDA: on the CPU, Lightning's 16-mixed is refused exactly as
  // train.precision=fp16 is, and trainer.precision=32 runs it.
  const auto lightning = dbh({"run", c.file.string(), "hardware.device=cpu", "trainer.precision=16-mixed"});
  const auto native = dbh({"run", c.file.string(), "hardware.device=cpu", "train.precision=fp16"});
  EXPECT_EQ(lightning.exit_code, 2) << lightning.err;
  EXPECT_EQ(native.exit_code, 2) << native.err;
  const std::string refusal = "train.precision: expected fp32 on hardware.device cpu (AMP runs on CUDA), got \"fp16\"";
  EXPECT_NE(lightning.err.find(refusal), std::string::npos) << lightning.err;
  EXPECT_NE(native.err.find(refusal), std::string::npos) << native.err;

  const json report = run_cheaply(c.file, dir / "out", {"trainer.precision=32"});
  EXPECT_EQ(report.value("outcome", ""), "passed");
  const json& r = report["scenario"]["resolved"];
  EXPECT_EQ(r["name"], "ocr_training-dbnet-resnet50-fp16");
  EXPECT_EQ(r["data"]["batch_size"], 2);
  EXPECT_EQ(r["train"]["precision"], "fp32");
  EXPECT_EQ(r["hardware"]["profile"], "rtx3060-12gb");
}

TEST(FromCommandCliTest, StdoutBaseAndForce) {
  const fs::path dir = fresh_dir("dbh-from-command-out");
  RemoveOnExit cleanup(dir);
  // On stdout: the same scenario, its unmapped keys on stderr only.
  const auto printed = dbh({"scenario", "from-command", kSeed000});
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_EQ(printed.out.rfind("# Generated by `dbh scenario from-command`", 0), 0u) << printed.out;
  EXPECT_EQ(printed.out.find("unmapped: "), std::string::npos);
  write_text(dir / "printed.yaml", printed.out);
  EXPECT_EQ(harness::scenario::load_scenario((dir / "printed.yaml").string()).model.encoder, 18);

  // --base: included relative to the written file; the base names the device.
  const Converted based =
      convert(dir, kSeed000, {"--base", std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml"});
  ASSERT_EQ(based.result.exit_code, 0) << based.result.err;
  const harness::scenario::Scenario s = harness::scenario::load_scenario(based.file.string());
  EXPECT_EQ(s.hardware.device, "cpu");
  EXPECT_EQ(s.data.size, 64);
  EXPECT_EQ(s.train.max_steps, 10);

  // An existing file is kept unless --force.
  const std::string before = read_text(based.file);
  const Converted again = convert(dir, kSeed003Fp16);
  EXPECT_EQ(again.result.exit_code, 2);
  EXPECT_NE(again.result.err.find("expected a new file (or --force to replace it)"), std::string::npos)
      << again.result.err;
  EXPECT_EQ(read_text(based.file), before);
  const Converted forced = convert(dir, kSeed003Fp16, {"--force"});
  EXPECT_EQ(forced.result.exit_code, 0) << forced.result.err;
  EXPECT_NE(read_text(based.file).find("precision: fp16"), std::string::npos);
  // Nothing else is left beside it.
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir))
    ++files;
  EXPECT_EQ(files, 2u);  // printed.yaml, scenario.yaml
}

TEST(FromCommandCliTest, BadInputExitsTwoAndNamesIt) {
  const fs::path dir = fresh_dir("dbh-from-command-bad");
  RemoveOnExit cleanup(dir);
  struct Case {
    std::string command;
    std::string message;
  };
  for (const Case& k : std::vector<Case>{
           {"", "expected a training command such as \"python runners/train.py key=value …\", got an empty command"},
           {"python runners/train.py exp_name='unbalanced trainer.max_steps=10",
            "unbalanced quote: expected a closing ' for the quote opened at line 1, column 34"},
           {"python runners/train.py trainer.precision=16-mixd",
            "trainer.precision=16-mixd: trainer.precision (dbh's train.precision): expected 32, 32-true, 16, "
            "16-mixed, bf16 or bf16-mixed, got \"16-mixd\""},
       }) {
    const Converted c = convert(dir, k.command);
    EXPECT_EQ(c.result.exit_code, 2) << k.command << "\n" << c.result.err;
    EXPECT_NE(c.result.err.find(k.message), std::string::npos) << c.result.err;
    EXPECT_FALSE(fs::exists(c.file)) << k.command;
  }
  // A Lightning key that cannot be mapped is refused as an override, too.
  const auto run = dbh({"run", "scenarios/ci-smoke.yaml", "trainer.precision=16-mixd"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("<override> trainer.precision=16-mixd: trainer.precision (dbh's train.precision): "
                         "expected 32, 32-true, 16, 16-mixed, bf16 or bf16-mixed, got \"16-mixd\""),
            std::string::npos)
      << run.err;
  EXPECT_TRUE(fs::is_empty(dir));
}

// An image size, as the script's flag or as Lightning's key, is read
// strictly: every malformed list is exit 2 naming the flag, what it expects
// and (at most 80 bytes of) what it got, and nothing is written.
TEST(FromCommandCliTest, MalformedImageSizesExitTwoAndNameTheFlag) {
  const fs::path dir = fresh_dir("dbh-from-command-size");
  RemoveOnExit cleanup(dir);
  const std::string expected =
      "expected N or [N, N] with N a whole number of pixels from 1 to 8192 (dbh trains at multiples of 32), got ";
  struct Case {
    std::string command;
    std::string message;
  };
  const std::string p = "python runners/train.py ";
  const std::string at = " at line 1, column 25: ";
  const std::string huge(200, '9');
  // Every malformed form, through the converter the command calls (the
  // binary's start-up would cost more than all of them); three of them through
  // the binary below.
  for (const Case& k : std::vector<Case>{
           {p + "--target_size " + huge + " trainer.max_steps=3", "… (200 bytes)\" (a number above 8192, \"9999"},
           {p + "--target_size 640,", "--target_size" + at + expected + "\"640,\" (a list that ends with a comma)"},
           {p + "--target_size=640,abc", "--target_size" + at + expected + "\"640,abc\" (\"abc\", which is not a whole number)"},
           {p + "--target_size [640", "--target_size" + at + expected + "\"[640\" (a '[' that is never closed)"},
           {p + "--target_size 640]", "--target_size" + at + expected + "\"640]\" (a ']' without its opening)"},
           {p + "--target_size '(640, 640]'", "(a '(' closed by ']')"},
           {p + "--target_size [[640]]", "(a nested or second list)"},
           {p + "--target_size -640", "--target_size" + at + expected + "\"-640\" (a negative number, \"-640\")"},
           {p + "--image_size 0", "--image_size" + at + expected + "\"0\" (0, a size of no pixels)"},
           {p + "--img-size 640 640 640", "\"640,640,640\" (3 numbers; a size has a width and a height)"},
           {p + "--imgsz 640,,640", "(an empty element between two commas)"},
           {p + "--input_size ,640", "(a list that starts with a comma)"},
           {p + "--target_size 64.5", "(\"64.5\", which is not a whole number)"},
           {p + "--target_size '6 40'", "(two values without a comma between them, \"6 40\")"},
           {p + "--target_size 16384", "(a number above 8192, \"16384\")"},
           {p + "--target_size " + huge, "got \"" + huge.substr(0, 60)},
           {p + "--target_size", "--target_size" + at + "expected a size after it (N or [N, N]), got the end of the command"},
           {p + "--target_size --lr 0.1", "expected a size after it (N or [N, N]), got the flag --lr"},
           {p + "--target_size=", "(an empty value)"},
           {p + "preprocessing.target_size=[640", "preprocessing.target_size" + at + expected + "\"[640\" (a '[' that is never closed)"},
           {p + "preprocessing.target_size=640,", "(a list that ends with a comma)"},
           {p + "+preprocessing.target_size=[640,640,640]", "(3 numbers; a size has a width and a height)"},
           {p + "preprocessing.target_size=-32", "(a negative number, \"-32\")"},
       }) {
    std::string err;
    try {
      (void)harness::scenario::scenario_from_command(k.command);
    } catch (const harness::UsageError& e) {
      err = e.what();
    }
    EXPECT_NE(err.find("scenario from-command: "), std::string::npos) << k.command << "\n" << err;
    EXPECT_NE(err.find(k.message), std::string::npos) << k.command << "\n" << err;
    EXPECT_LT(err.size(), 400u) << "the found text is quoted short: " << err;
  }
  for (const std::string& command :
       {p + "--target_size 640,", p + "preprocessing.target_size=[640", p + "--target_size " + huge}) {
    const Converted c = convert(dir, command);
    EXPECT_EQ(c.result.exit_code, 2) << command << "\n" << c.result.err;
    EXPECT_NE(c.result.err.find("scenario from-command: "), std::string::npos) << c.result.err;
    EXPECT_LT(c.result.err.size(), 400u) << "the found text is quoted short: " << c.result.err;
    EXPECT_FALSE(fs::exists(c.file)) << command;
  }
  EXPECT_TRUE(fs::is_empty(dir));

  // Well-formed sizes map to data.size; a size dbh cannot train at is listed.
  for (const char* ok : {"--target_size 640", "--target_size=640", "--image-size 640 640",
                                "--target_size [640, 640]", "--img_size '(640,640)'", "'preprocessing.target_size=[640, 640]'"}) {
    const Converted c = convert(dir, p + ok, {"--force"});
    ASSERT_EQ(c.result.exit_code, 0) << ok << "\n" << c.result.err;
    EXPECT_EQ(harness::scenario::load_scenario(c.file.string()).data.size, 640) << ok << "\n" << read_text(c.file);
  }
  const Converted square = convert(dir, p + "--target_size 512 640 trainer.max_steps=3", {"--force"});
  ASSERT_EQ(square.result.exit_code, 0) << square.result.err;
  EXPECT_NE(square.result.err.find("unmapped: --target_size 512 640 (dbh trains on square images"), std::string::npos)
      << square.result.err;
  EXPECT_EQ(harness::scenario::load_scenario(square.file.string()).train.max_steps, 3);
}

// Bytes that are not UTF-8 in a name or a path are bad input (exit 2, named),
// never an internal error: a scenario is a UTF-8 file. A flag's value is
// refused by the command line's one check (Note [Writable before work]'s
// walk); a word of the converted command by from-command itself.
TEST(FromCommandCliTest, BytesThatAreNotUtf8AreBadInputNotAnInternalError) {
  const fs::path dir = fresh_dir("dbh-from-command-utf8");
  RemoveOnExit cleanup(dir);
  const std::string bad = "a\xff\xfe" "b";
  const auto exp_name = dbh({"scenario", "from-command", "python runners/train.py exp_name=" + bad});
  EXPECT_EQ(exp_name.exit_code, 2) << exp_name.err;
  EXPECT_NE(exp_name.err.find("exp_name (dbh's name): expected a one-line name of printable UTF-8"),
            std::string::npos)
      << exp_name.err;
  const auto name = dbh({"scenario", "from-command", "python runners/train.py", "--name", bad});
  EXPECT_EQ(name.exit_code, 2) << name.err;
  EXPECT_NE(name.err.find("dbh scenario from-command: --name a"), std::string::npos) << name.err;
  EXPECT_NE(name.err.find("b: expected UTF-8"), std::string::npos) << name.err;
  const fs::path base = dir / ("base-" + bad + ".yaml");
  write_text(base, "name: base\n");
  const auto with_base = dbh({"scenario", "from-command", "python runners/train.py", "--base", base.string()});
  EXPECT_EQ(with_base.exit_code, 2) << with_base.err;
  EXPECT_NE(with_base.err.find("dbh scenario from-command: --base " + dir.string()), std::string::npos) << with_base.err;
  EXPECT_NE(with_base.err.find(".yaml: expected UTF-8"), std::string::npos) << with_base.err;
  // The same alias as an override of `dbh run`.
  const auto run = dbh({"run", "scenarios/ci-smoke.yaml", "exp_name=" + bad, "--print-config"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("dbh run: exp_name=a"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("b: expected UTF-8"), std::string::npos) << run.err;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1) << "only the base is there";
}

}  // namespace
}  // namespace dbh
