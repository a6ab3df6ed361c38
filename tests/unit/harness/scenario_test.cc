// Scenario loading: includes and overrides, the error message contract
// ("file:line:col: key: expected …, got …"), the resolved JSON round trip and
// its hash, and byte sizes.
#include <unistd.h>

#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/scenario/fault_catalog.h"
#include "harness/scenario/fault_choices.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/common/value.h"
#include "tests/support/files.h"
#include "model/observed_modules.h"
#include "tests/support/paths.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;

// A fresh temporary folder per test for scenario files.
class ScenarioFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::path(::testing::TempDir()) / "dbh-scenario-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  /// Writes `text` to `name` under the folder and returns its path.
  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary);
    out << text;
    return p.string();
  }

  /// Loads `path` and returns the ScenarioError's message ("" if none).
  static std::string load_error(const std::string& path,
                                const std::vector<std::string>& overrides = {}) {
    try {
      (void)scenario::load_scenario(path, overrides);
    } catch (const ScenarioError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

// Whether `message` reads "<file>:<line>:<col>: <key>: expected …, got …" with
// the given line and column.
::testing::AssertionResult HasContractForm(const std::string& message, const std::string& file,
                                           int line, int column, const std::string& key) {
  const std::string head =
      file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + key + ": expected ";
  if (message.rfind(head, 0) != 0) {
    return ::testing::AssertionFailure() << "message \"" << message << "\" does not start with \""
                                         << head << "\"";
  }
  if (message.find(", got ", head.size()) == std::string::npos) {
    return ::testing::AssertionFailure() << "message \"" << message << "\" has no \", got \"";
  }
  return ::testing::AssertionSuccess();
}

std::string base_path() { return std::string(DBH_SOURCE_DIR) + "/scenarios/base/tiny-cpu.yaml"; }

// --- includes and overrides ------------------------------------------------

TEST_F(ScenarioFiles, IncludesMergeWithLaterFilesAndTheIncludingFileWinning) {
  write("base/a.yaml",
        "data:\n  size: 64\n  batch_size: 3\ntrain:\n  max_steps: 4\n  lr: 0.01\n");
  // Includes are relative to the including file: b.yaml includes a.yaml from base/.
  write("base/b.yaml", "include: a.yaml\ntrain:\n  max_steps: 6\n  seed: 7\n");
  write("c.yaml", "train:\n  seed: 9\n  momentum: 0.5\n");
  const auto top = write("top.yaml",
                         "name: top\ninclude: [base/b.yaml, c.yaml]\ndata:\n  size: 96\n");
  const scenario::Scenario s = scenario::load_scenario(top);
  EXPECT_EQ(s.name, "top");
  EXPECT_EQ(s.data.size, 96);             // own value beats every include
  EXPECT_EQ(s.data.batch_size, 3);        // from the innermost include
  EXPECT_EQ(s.train.max_steps, 6);        // b.yaml beats the a.yaml it includes
  EXPECT_EQ(s.train.seed, 9u);            // c.yaml (later) beats b.yaml (earlier)
  EXPECT_DOUBLE_EQ(s.train.lr, 0.01);     // maps merge key by key
  EXPECT_DOUBLE_EQ(s.train.momentum, 0.5);
  EXPECT_EQ(s.file, top);
}

TEST_F(ScenarioFiles, OverridesBeatFilesAndAreRecorded) {
  const auto top = write("top.yaml", "include: " + base_path() +
                                         "\nfaults:\n  - name: nan_activation\n"
                                         "    module: decoder.fusion\n    at_step: 1\n");
  const std::vector<std::string> overrides = {"model.encoder=resnet50", "data.batch_size=2",
                                              "faults.0.at_step=3", "train.max_steps=9"};
  const scenario::Scenario s = scenario::load_scenario(top, overrides);
  EXPECT_EQ(s.model.encoder, 50);
  EXPECT_EQ(s.data.batch_size, 2);
  ASSERT_EQ(s.faults.size(), 1u);
  EXPECT_EQ(s.faults[0].at_step, 3);
  EXPECT_EQ(s.faults[0].until_step, 3);  // defaults to at_step
  EXPECT_EQ(s.faults[0].get("module"), "decoder.fusion");
  EXPECT_EQ(s.train.max_steps, 9);
  EXPECT_EQ(s.data.size, 64);  // untouched values still come from the include
  EXPECT_EQ(s.overrides, overrides);
  // The last of two overrides of one key wins.
  EXPECT_EQ(scenario::load_scenario(top, {"data.size=96", "data.size=128"}).data.size, 128);
}

TEST_F(ScenarioFiles, ShippedBaseAndDefaultsAreFilledIn) {
  const scenario::Scenario s = scenario::load_scenario(write("s.yaml", "include: " + base_path() + "\n"));
  EXPECT_EQ(s.name, "s");  // the file's stem when no name is given
  EXPECT_EQ(s.model.encoder, 18);
  EXPECT_EQ(s.model.decoder, model::DecoderKind::kFpn);
  EXPECT_DOUBLE_EQ(s.model.k, 50.0);
  EXPECT_EQ(s.train.threads, 2);
  EXPECT_EQ(s.train.optimizer, model::OptimizerKind::kSgd);
  EXPECT_EQ(s.monitors.mode, scenario::MonitorMode::kCheap);
  EXPECT_EQ(s.expect.outcome, scenario::Outcome::kPassed);
  EXPECT_FALSE(s.expect.step.has_value());
  EXPECT_DOUBLE_EQ(s.limits.silence_s, 60);
  EXPECT_DOUBLE_EQ(s.limits.grace_s, 5);
  EXPECT_TRUE(s.faults.empty());
}

TEST_F(ScenarioFiles, FaultParametersGetTheirCatalogDefaults) {
  const scenario::Scenario s = scenario::load_scenario(write("f.yaml",
                                         "faults:\n  - name: crash\n    at_step: 2\n"
                                         "  - name: leak\n    until_step: 3\n    run: 1\n"
                                         "  - name: slow_data\n    seconds: 0.25\n"
                                         "repeat: {in_process: 2}\n"));
  ASSERT_EQ(s.faults.size(), 3u);
  EXPECT_EQ(s.faults[0].get("signal"), "SIGSEGV");
  EXPECT_EQ(s.faults[0].loc.line, 2);
  EXPECT_TRUE(s.faults[0].fires_at(2, 0));
  EXPECT_FALSE(s.faults[0].fires_at(1, 0));
  EXPECT_FALSE(s.faults[0].fires_at(3, 0));
  EXPECT_EQ(s.faults[1].get_bytes("bytes"), 64 * 1024 * 1024);
  EXPECT_TRUE(s.faults[1].fires_at(3, 1));
  EXPECT_FALSE(s.faults[1].fires_at(3, 0));  // only run 1
  EXPECT_FALSE(s.faults[1].fires_at(4, 1));
  EXPECT_DOUBLE_EQ(s.faults[2].get_double("seconds"), 0.25);
  EXPECT_THROW(s.faults[2].get("nothing"), std::logic_error);  // not declared: a bug, never ""
}

// A choice parameter reads as its enum; the enum's names are the catalog's
// allowed values, in order, for every choice; a parameter that is not that
// choice is a bug, never a default.
TEST_F(ScenarioFiles, FaultChoiceParametersReadAsTheirEnums) {
  const scenario::Scenario s = scenario::load_scenario(write("f.yaml",
                                         "faults:\n  - name: crash\n    signal: SIGBUS\n"
                                         "  - name: memory_ballast\n    bytes: 1MiB\n    on: host\n"
                                         "  - name: wrong_normalisation\n"));
  ASSERT_EQ(s.faults.size(), 3u);
  EXPECT_EQ(scenario::choice_param<scenario::CrashSignal>(s.faults[0], "signal"), scenario::CrashSignal::kBus);
  EXPECT_EQ(scenario::choice_param<scenario::MemorySide>(s.faults[1], "on"), scenario::MemorySide::kHost);
  EXPECT_EQ(scenario::choice_param<scenario::Normalisation>(s.faults[2], "kind"), scenario::Normalisation::kBlack);
  EXPECT_EQ(scenario::choice_name(scenario::MemorySide::kHost), "host");
  // Read as another choice, or as a parameter that is no choice: a bug.
  EXPECT_THROW(scenario::choice_param<scenario::MemorySide>(s.faults[0], "signal"), std::logic_error);
  EXPECT_THROW(scenario::choice_param<scenario::MemorySide>(s.faults[1], "bytes"), std::logic_error);
  EXPECT_THROW(scenario::choice_param<scenario::MemorySide>(s.faults[1], "of"), std::logic_error);
  const auto allowed = [](const char* fault, const char* param) {
    for (const auto& p : scenario::find_fault(fault)->params) {
      if (p.name == param) return p.allowed;
    }
    return std::vector<std::string>{};
  };
  EXPECT_EQ(allowed("unstable_binarization", "dtype"), scenario::choice_names(scenario::BinarizationDtype{}));
  EXPECT_EQ(allowed("memory_ballast", "on"), scenario::choice_names(scenario::MemorySide{}));
  EXPECT_EQ(allowed("cuda_error", "kind"), scenario::choice_names(scenario::CudaErrorKind{}));
  EXPECT_EQ(allowed("crash", "signal"), scenario::choice_names(scenario::CrashSignal{}));
  EXPECT_EQ(allowed("corrupt_sample", "kind"), scenario::choice_names(scenario::SampleCorruption{}));
  EXPECT_EQ(allowed("wrong_normalisation", "kind"), scenario::choice_names(scenario::Normalisation{}));
  EXPECT_EQ(allowed("nan_label", "map"), scenario::choice_names(scenario::LabelMap{}));
  // Every string parameter with a fixed set of values is one of these choices.
  std::set<std::vector<std::string>> choices = {
      scenario::choice_names(scenario::BinarizationDtype{}), scenario::choice_names(scenario::MemorySide{}),
      scenario::choice_names(scenario::CudaErrorKind{}),     scenario::choice_names(scenario::CrashSignal{}),
      scenario::choice_names(scenario::SampleCorruption{}),  scenario::choice_names(scenario::Normalisation{}),
      scenario::choice_names(scenario::LabelMap{})};
  for (const auto& f : scenario::fault_catalog()) {
    for (const auto& p : f.params) {
      if (p.allowed.empty()) continue;
      EXPECT_EQ(choices.count(p.allowed), 1u) << f.name << "." << p.name;
    }
  }
}

// A fault's parameters are decoded once, to their catalog types; the text as
// written is what the resolved JSON (and so a worker) receives.
TEST_F(ScenarioFiles, FaultParametersAreDecodedOnceToTheirTypesAndKeepTheirText) {
  const scenario::Scenario s = scenario::load_scenario(write("f.yaml",
                                         "faults:\n  - name: leak\n    bytes: 1.5MiB\n"
                                         "  - name: slow_data\n    seconds: 2.5e-1\n"
                                         "repeat: {in_process: 2}\n"));
  ASSERT_EQ(s.faults.size(), 2u);
  EXPECT_EQ(s.faults[0].get_bytes("bytes"), 1536 * 1024);
  EXPECT_EQ(s.faults[0].get("bytes"), "1.5MiB");
  EXPECT_DOUBLE_EQ(s.faults[1].get_double("seconds"), 0.25);
  EXPECT_EQ(s.faults[1].get("seconds"), "2.5e-1");
  const std::string json = scenario::resolved_json(s);
  EXPECT_NE(json.find("\"bytes\": \"1.5MiB\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"seconds\": \"2.5e-1\""), std::string::npos) << json;
  // A reader and the catalog disagreeing on a type is a bug, not a zero.
  EXPECT_THROW(s.faults[0].get_double("bytes"), std::logic_error);
  EXPECT_THROW(s.faults[1].get_int("seconds"), std::logic_error);
  // A parameter the fault does not declare (a misspelt name in dbh's code)
  // is a bug, never a 0.
  EXPECT_THROW(s.faults[1].get_int("sample"), std::logic_error);
  EXPECT_THROW(s.faults[1].get_bool("sticky"), std::logic_error);
  EXPECT_THROW(s.faults[1].get("second"), std::logic_error);
  EXPECT_EQ(s.faults[1].module(), "");
  // The worker decodes the resolved JSON to the same values.
  const scenario::Scenario again = scenario::decode_scenario(parse_yaml(json, "scenario.resolved.json"), "");
  EXPECT_EQ(again.faults[0].get_bytes("bytes"), 1536 * 1024);
  EXPECT_DOUBLE_EQ(again.faults[1].get_double("seconds"), 0.25);
}

// --- error messages --------------------------------------------------------

TEST_F(ScenarioFiles, UnknownKeySuggestsTheNearestKnownOne) {
  const auto p = write("e.yaml", "include: " + base_path() + "\nmodel:\n  encodr: resnet18\n");
  const auto m = load_error(p);
  EXPECT_TRUE(HasContractForm(m, p, 3, 3, "model.encodr"));
  EXPECT_NE(m.find("unknown key"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean \"encoder\"?"), std::string::npos) << m;
}

// Note [Probes on a cluster]: the card a scenario asks about, named once in
// it; what srun would misread is refused where it is written.
TEST_F(ScenarioFiles, ClusterKeysNameWhereProbesRunAndAreCheckedWhereWritten) {
  const auto p = write("c.yaml", "include: " + base_path() + "\ncluster:\n  partition: gpu12\n  time_limit: \"1:00:00\"\n");
  const scenario::Scenario s = scenario::load_scenario(p);
  EXPECT_EQ(s.cluster.partition, "gpu12");
  EXPECT_EQ(s.cluster.time_limit, "1:00:00");
  EXPECT_EQ(s.cluster.gpu_type, "");
  EXPECT_NE(scenario::resolved_json(s).find("\"cluster\""), std::string::npos);
  // A scenario that names none keeps its resolved form, and so its hash.
  EXPECT_EQ(scenario::resolved_json(scenario::load_scenario(base_path())).find("\"cluster\""), std::string::npos);
  const auto t = write("t.yaml", "include: " + base_path() + "\ncluster:\n  time_limit: 1h\n");
  const std::string m = load_error(t);
  EXPECT_TRUE(HasContractForm(m, t, 3, 15, "cluster.time_limit")) << m;
  EXPECT_NE(m.find("a Slurm time"), std::string::npos) << m;
  const auto g = write("g.yaml", "include: " + base_path() + "\ncluster:\n  gpu_type: \"a100:2\"\n");
  EXPECT_TRUE(HasContractForm(load_error(g), g, 3, 13, "cluster.gpu_type")) << load_error(g);
  EXPECT_NE(load_error(p, {"cluster.partition=gpu 12"}).find("cluster.partition: expected a name without spaces"),
            std::string::npos)
      << load_error(p, {"cluster.partition=gpu 12"});
}

TEST_F(ScenarioFiles, UnknownTopLevelKeySuggestsTheNearestKnownOne) {
  const auto p = write("e.yaml", "name: x\nfualts: []\n");
  const auto m = load_error(p);
  EXPECT_TRUE(HasContractForm(m, p, 2, 1, "fualts"));
  EXPECT_NE(m.find("did you mean \"faults\"?"), std::string::npos) << m;
}

TEST_F(ScenarioFiles, WrongTypeNamesWhatWasFound) {
  const auto p = write("e.yaml", "data:\n  batch_size: [1]\n");
  const auto m = load_error(p);
  EXPECT_TRUE(HasContractForm(m, p, 2, 15, "data.batch_size"));
  EXPECT_NE(m.find("got a list"), std::string::npos) << m;

  const auto q = write("f.yaml", "train:\n  lr: fast\n");
  EXPECT_TRUE(HasContractForm(load_error(q), q, 2, 7, "train.lr"));
  const auto r = write("g.yaml", "data:\n  augment: maybe\n");
  const auto mr = load_error(r);
  EXPECT_TRUE(HasContractForm(mr, r, 2, 12, "data.augment"));
  EXPECT_NE(mr.find("expected true or false, got \"maybe\""), std::string::npos) << mr;
  const auto t = write("h.yaml", "model: resnet18\n");
  const auto mt = load_error(t);
  EXPECT_TRUE(HasContractForm(mt, t, 1, 8, "model"));
  EXPECT_NE(mt.find("expected a map, got \"resnet18\""), std::string::npos) << mt;
}

TEST_F(ScenarioFiles, OutOfRangeValuesNameTheRange) {
  const auto p = write("e.yaml", "data:\n  batch_size: 0\n");
  const auto m = load_error(p);
  EXPECT_TRUE(HasContractForm(m, p, 2, 15, "data.batch_size"));
  EXPECT_NE(m.find("expected an integer in [1, 4096], got \"0\""), std::string::npos) << m;

  const auto q = write("f.yaml", "data:\n  size: 100\n");
  const auto mq = load_error(q);
  EXPECT_TRUE(HasContractForm(mq, q, 2, 9, "data.size"));
  EXPECT_NE(mq.find("multiple of 32"), std::string::npos) << mq;

  const auto r = write("g.yaml", "train:\n  momentum: 1.5\n");
  EXPECT_TRUE(HasContractForm(load_error(r), r, 2, 13, "train.momentum"));
  const auto s = write("h.yaml", "expect:\n  step: -1\n");
  EXPECT_TRUE(HasContractForm(load_error(s), s, 2, 9, "expect.step"));
  const auto t = write("i.yaml", "faults:\n  - name: crash\n    at_step: 3\n    until_step: 1\n");
  EXPECT_TRUE(HasContractForm(load_error(t), t, 4, 17, "faults[0].until_step"));
}

TEST_F(ScenarioFiles, BadEnumValueSuggestsTheNearestAllowedOne) {
  const auto p = write("e.yaml", "model:\n  decoder: fnp\n");
  const auto m = load_error(p);
  EXPECT_TRUE(HasContractForm(m, p, 2, 12, "model.decoder"));
  EXPECT_NE(m.find("expected one of fpn, pan, got \"fnp\" (did you mean \"fpn\"?)"),
            std::string::npos)
      << m;
  const auto q = write("f.yaml", "expect:\n  outcome: crahsed\n");
  const auto mq = load_error(q);
  EXPECT_TRUE(HasContractForm(mq, q, 2, 12, "expect.outcome"));
  EXPECT_NE(mq.find("did you mean \"crashed\"?"), std::string::npos) << mq;
  const auto r = write("g.yaml", "model:\n  encoder: resnet101\n");
  EXPECT_TRUE(HasContractForm(load_error(r), r, 2, 12, "model.encoder"));
}

TEST_F(ScenarioFiles, UnknownFaultNameSuggestsACatalogName) {
  const auto p = write("e.yaml", "faults:\n  - name: nan_activatoin\n    module: decoder.fusion\n");
  const auto m = load_error(p);
  EXPECT_TRUE(HasContractForm(m, p, 2, 11, "faults[0].name"));
  EXPECT_NE(m.find("did you mean \"nan_activation\"?"), std::string::npos) << m;
  const auto q = write("f.yaml", "faults:\n  - at_step: 1\n");
  const auto mq = load_error(q);
  EXPECT_TRUE(HasContractForm(mq, q, 2, 5, "faults[0].name"));
  EXPECT_NE(mq.find("got none"), std::string::npos) << mq;
}

TEST_F(ScenarioFiles, BadFaultParameterIsNamedWithItsFault) {
  const auto p = write("e.yaml", "faults:\n  - name: crash\n    signal: SIGSEV\n");
  const auto m = load_error(p);
  EXPECT_TRUE(HasContractForm(m, p, 3, 13, "faults[0].signal"));
  EXPECT_NE(m.find("did you mean \"SIGSEGV\"?"), std::string::npos) << m;

  const auto q = write("f.yaml", "faults:\n  - name: slow_data\n    seconds: abc\n");
  const auto mq = load_error(q);
  EXPECT_TRUE(HasContractForm(mq, q, 3, 14, "faults[0].seconds"));
  EXPECT_NE(mq.find("expected a number, got \"abc\""), std::string::npos) << mq;

  const auto r = write("g.yaml", "faults:\n  - name: leak\n    bytes: lots\n");
  EXPECT_TRUE(HasContractForm(load_error(r), r, 3, 12, "faults[0].bytes"));

  // An unknown parameter of a fault, with a suggestion.
  const auto s = write("h.yaml", "faults:\n  - name: crash\n    signl: SIGABRT\n");
  const auto ms = load_error(s);
  EXPECT_TRUE(HasContractForm(ms, s, 3, 5, "faults[0].signl"));
  EXPECT_NE(ms.find("did you mean \"signal\"?"), std::string::npos) << ms;

  // A required parameter left out.
  const auto t = write("i.yaml", "faults:\n  - name: memory_cap\n");
  const auto mt = load_error(t);
  EXPECT_TRUE(HasContractForm(mt, t, 2, 5, "faults[0].bytes"));
  EXPECT_NE(mt.find("required by memory_cap"), std::string::npos) << mt;
}

TEST_F(ScenarioFiles, ModuleNameMustBeOneTheModelReports) {
  const auto p = write("e.yaml", "faults:\n  - name: nan_activation\n    module: decoder.fusoin\n");
  const auto m = load_error(p);
  EXPECT_TRUE(HasContractForm(m, p, 3, 13, "faults[0].module"));
  EXPECT_NE(m.find("a module name of the fpn model"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean \"decoder.fusion\"?"), std::string::npos) << m;
  // decoder.merge3 exists in PAN only.
  const auto q = write("f.yaml", "faults:\n  - name: nan_activation\n    module: decoder.merge3\n");
  EXPECT_TRUE(HasContractForm(load_error(q), q, 3, 13, "faults[0].module"));
  const auto r = write("g.yaml",
                       "model:\n  decoder: pan\nfaults:\n  - name: nan_activation\n"
                       "    module: decoder.merge3\n");
  EXPECT_EQ(load_error(r), "");
  // nan_gradient takes a module prefix.
  const auto s = write("h.yaml", "faults:\n  - name: nan_gradient\n    module: head\n");
  EXPECT_EQ(load_error(s), "");
}

TEST_F(ScenarioFiles, IncludeCycleIsAnErrorNamingTheChain) {
  const auto a = write("a.yaml", "include: b.yaml\n");
  write("b.yaml", "name: b\ninclude: a.yaml\n");
  const auto m = load_error(a);
  EXPECT_NE(m.find("include: expected no cycle"), std::string::npos) << m;
  EXPECT_NE(m.find("a.yaml -> "), std::string::npos) << m;
  EXPECT_NE(m.find("b.yaml -> "), std::string::npos) << m;
  // A file including itself.
  const auto self = write("self.yaml", "include: self.yaml\n");
  EXPECT_NE(load_error(self).find("expected no cycle"), std::string::npos);
}

// BUG (harness/scenario/load.cc, load_with_includes): the include-cycle
// error has no line and column ("a.yaml: include: expected no cycle, got …"),
// unlike every other scenario error; it should point at the `include:` entry
// that closes the cycle (b.yaml:2:10 here).
TEST_F(ScenarioFiles, IncludeCycleErrorPointsAtTheIncludeLine) {
  write("a.yaml", "include: b.yaml\n");
  const auto b = write("b.yaml", "name: b\ninclude: a.yaml\n");
  const auto m = load_error((dir_ / "a.yaml").string());
  EXPECT_TRUE(HasContractForm(m, b, 2, 10, "include"));
}

TEST_F(ScenarioFiles, MissingIncludeNamesTheIncludeLine) {
  const auto p = write("e.yaml", "name: x\ninclude:\n  - nothere.yaml\n");
  const auto m = load_error(p);
  EXPECT_TRUE(HasContractForm(m, p, 3, 5, "include"));
  EXPECT_NE(m.find("nothere.yaml"), std::string::npos) << m;
}

TEST_F(ScenarioFiles, MissingScenarioFileIsAnError) {
  const auto m = load_error((dir_ / "absent.yaml").string());
  EXPECT_NE(m.find("absent.yaml: expected a scenario file, got none"), std::string::npos) << m;
}

TEST_F(ScenarioFiles, YamlSyntaxErrorHasLineAndColumn) {
  const auto p = write("e.yaml", "model:\n  encoder: resnet18\n decoder: fpn\n");
  const auto m = load_error(p);
  EXPECT_EQ(m.rfind(p + ":3:2: expected valid YAML, got a syntax error", 0), 0u) << m;
  const auto q = write("f.yaml", "model:\n  encoder: [resnet18\ndata: 1\n");
  const auto mq = load_error(q);
  EXPECT_TRUE(std::regex_search(mq, std::regex("^" + std::regex_replace(q, std::regex("[.]"), "\\.") +
                                               ":[0-9]+:[0-9]+: expected valid YAML")))
      << mq;
  EXPECT_NE(mq.find("got a syntax error"), std::string::npos) << mq;
}

TEST_F(ScenarioFiles, DuplicateKeyIsAnError) {
  const auto p = write("e.yaml", "model:\n  encoder: resnet18\n  encoder: resnet34\n");
  const auto m = load_error(p);
  EXPECT_EQ(m.rfind(p + ":3:3: ", 0), 0u) << m;
  EXPECT_NE(m.find("encoder: expected each key once, got a duplicate"), std::string::npos) << m;
  const auto q = write("f.yaml", "name: a\nname: b\n");
  EXPECT_TRUE(HasContractForm(load_error(q), q, 2, 1, "name"));
}

TEST_F(ScenarioFiles, TopLevelMustBeAMap) {
  const auto p = write("e.yaml", "[1, 2]\n");
  EXPECT_TRUE(HasContractForm(load_error(p), p, 1, 1, "(top level)"));
  const auto q = write("f.yaml", "faults: {name: crash}\n");
  EXPECT_TRUE(HasContractForm(load_error(q), q, 1, 9, "faults"));
}

TEST_F(ScenarioFiles, PrecisionOtherThanFp32OnCpuIsRejected) {
  const auto p = write("e.yaml", "train:\n  precision: fp16\n");
  const auto m = load_error(p);
  EXPECT_NE(m.find("train.precision: expected fp32 on hardware.device cpu"), std::string::npos)
      << m;
  EXPECT_EQ(load_error(write("f.yaml", "train:\n  precision: fp16\nhardware:\n  device: cuda\n")),
            "");
}

// A user's training decides what it runs on the CPU (PyTorch autocasts fp16
// there) and has its own modules: neither is checked against dbh's DBNet.
TEST_F(ScenarioFiles, AUsersTrainingIsNotHeldToDbhsOwnModelsRules) {
  const std::string worker = "worker: {command: [python3, train.py], cwd: " + dir_.string() + "}\n";
  EXPECT_EQ(load_error(write("g.yaml", worker + "train:\n  precision: fp16\n")), "");
  EXPECT_EQ(load_error(write("h.yaml", worker + "faults:\n  - {name: nan_gradient, module: body}\n")), "");
  const auto own = load_error(write("i.yaml", "faults:\n  - {name: nan_gradient, module: body}\n"));
  EXPECT_NE(own.find("faults[0].module: expected a module name of the fpn model"), std::string::npos) << own;
}

// BUG (harness/scenario/decode.cc, decode_scenario): the precision/device
// check reports Location{file, 0, 0}, so the message is "e.yaml:
// train.precision: …" without the line and column of `precision:`.
TEST_F(ScenarioFiles, PrecisionErrorHasLineAndColumn) {
  const auto p = write("e.yaml", "train:\n  precision: fp16\n");
  EXPECT_TRUE(HasContractForm(load_error(p), p, 2, 14, "train.precision"));
}

// --- override syntax -------------------------------------------------------

TEST_F(ScenarioFiles, OverrideErrorsNameTheOverride) {
  const auto p = write("s.yaml", "faults:\n  - name: crash\n    at_step: 1\n");
  // List index out of range.
  const auto m1 = load_error(p, {"faults.1.at_step=3"});
  EXPECT_NE(m1.find("<override> faults.1.at_step=3"), std::string::npos) << m1;
  EXPECT_NE(m1.find("expected an index below 1, got 1"), std::string::npos) << m1;
  // No '=' at all.
  const auto m2 = load_error(p, {"train.max_steps"});
  EXPECT_NE(m2.find("<override> train.max_steps: expected key.path=value, got no '='"),
            std::string::npos)
      << m2;
  // Nothing before '='.
  const auto m3 = load_error(p, {"=value"});
  EXPECT_NE(m3.find("<override> =value: expected a key before '='"), std::string::npos) << m3;
  // An empty path segment.
  const auto m4 = load_error(p, {"train..max_steps=3"});
  EXPECT_NE(m4.find("got an empty key"), std::string::npos) << m4;
  // A path through a scalar.
  const auto m5 = load_error(p, {"faults.0.at_step.x=3"});
  EXPECT_NE(m5.find("expected at_step to be a map, got \"1\""), std::string::npos) << m5;
  // Values are validated like file values and say they came from an override.
  const auto m6 = load_error(p, {"data.batch_size=0"});
  EXPECT_EQ(m6.rfind("<override>", 0), 0u) << m6;
  EXPECT_NE(m6.find("data.batch_size: expected an integer in [1, 4096], got \"0\""),
            std::string::npos)
      << m6;
  const auto m7 = load_error(p, {"model.encodr=resnet18"});
  EXPECT_NE(m7.find("did you mean \"encoder\"?"), std::string::npos) << m7;
  // A value that is not YAML.
  const auto m8 = load_error(p, {"data.batch_size=[1"});
  EXPECT_EQ(m8.rfind("<override>", 0), 0u) << m8;
  EXPECT_NE(m8.find("expected valid YAML"), std::string::npos) << m8;
}

// BUG (harness/scenario/value.cc, apply_override): "=value" has an '=' but the
// message says "got no '='"; it should say the key is empty.
TEST_F(ScenarioFiles, OverrideWithEmptyKeySaysSo) {
  const auto p = write("s.yaml", "name: s\n");
  const auto m = load_error(p, {"=value"});
  EXPECT_EQ(m.find("got no '='"), std::string::npos) << m;
  EXPECT_NE(m.find("empty key"), std::string::npos) << m;
}

// BUG (harness/scenario/value.cc, apply_override): a trailing '.' in the path
// is silently dropped (std::getline yields no last empty part), so
// "name.=x" sets `name` instead of being rejected like "a..b=x".
TEST_F(ScenarioFiles, OverrideWithTrailingDotIsRejected) {
  const auto p = write("s.yaml", "name: s\n");
  EXPECT_NE(load_error(p, {"name.=x"}).find("empty key"), std::string::npos);
}

TEST_F(ScenarioFiles, ControlsAreListsOfKeyValueStrings) {
  const auto p = write("s.yaml", "controls:\n  - [data.source=synthetic_random, train.lr=0.5]\n"
                                 "  - data.size=32\n");
  const scenario::Scenario s = scenario::load_scenario(p);
  ASSERT_EQ(s.controls.size(), 2u);
  EXPECT_EQ(s.controls[0], (std::vector<std::string>{"data.source=synthetic_random", "train.lr=0.5"}));
  EXPECT_EQ(s.controls[1], std::vector<std::string>{"data.size=32"});
  const auto q = write("t.yaml", "controls:\n  - [data.size]\n");
  EXPECT_TRUE(HasContractForm(load_error(q), q, 2, 5, "controls[0]"));
}

// BUG (harness/scenario/decode.cc, decode_scenario): control overrides
// are only checked for an '='; a value the scenario would reject
// ("data.batch_size=0") loads fine and fails only when `dbh run` reaches the
// control trial, after the main trial ran and its folder was written (exit 2
// with a partial output folder, and a message that does not name the control).
TEST_F(ScenarioFiles, InvalidControlOverridesAreRejectedAtLoad) {
  const auto p = write("s.yaml", "controls:\n  - [data.batch_size=0]\n");
  const auto m = load_error(p);
  EXPECT_NE(m.find("controls[0]"), std::string::npos) << m;
  EXPECT_NE(m.find("data.batch_size"), std::string::npos) << m;
}

std::string archive_file();  // below

// Note [Decode, then check]: decoding reads no file the scenario names (a
// worker decodes the scenario its supervisor checked); checking its inputs
// reads them, located at the key that names them.
TEST_F(ScenarioFiles, DecodingReadsNoFileTheScenarioNamesAndCheckingItsInputsDoes) {
  const std::string dataset = (dir_ / "no-such-dataset").string();
  const std::string weights = (dir_ / "no-such-weights.pt").string();
  const std::string text = "name: t\ndata:\n  source: real\n  path: " + dataset + "\n  subset: [7]\nmodel:\n  weights: " +
                           weights + "\n";
  const Value tree = parse_yaml(text, "t.yaml");
  const scenario::Scenario s = scenario::decode_scenario(tree, "t.yaml");
  EXPECT_EQ(s.data.path, dataset);
  EXPECT_EQ(s.model.weights, weights);
  auto check_error = [](const scenario::Scenario& sc, const Value& t, const scenario::InputChecks& checks = {}) -> std::string {
    try {
      scenario::check_scenario_inputs(sc, t, checks);
    } catch (const ScenarioError& e) {
      return e.what();
    }
    return "";
  };
  const std::string weights_error = check_error(s, tree);
  EXPECT_NE(weights_error.find("t.yaml:7:"), std::string::npos) << weights_error;
  EXPECT_NE(weights_error.find("model.weights"), std::string::npos) << weights_error;

  const Value no_weights = parse_yaml("name: t\ndata:\n  source: real\n  path: " + dataset + "\n", "t.yaml");
  const std::string data_error = check_error(scenario::decode_scenario(no_weights, "t.yaml"), no_weights);
  EXPECT_NE(data_error.find("t.yaml:4:"), std::string::npos) << data_error;
  EXPECT_NE(data_error.find("data.path: expected an existing dataset folder"), std::string::npos) << data_error;
}

TEST_F(ScenarioFiles, SampleIndicesAreCheckedAgainstTheDatasetWithTheInputs) {
  const std::string real = std::string(DBH_SOURCE_DIR) + "/fixtures/real";
  const Value tree = parse_yaml("name: t\ndata:\n  source: real\n  path: " + real + "\n  subset: [1, 12]\n", "t.yaml");
  const scenario::Scenario s = scenario::decode_scenario(tree, "t.yaml");  // the dataset's size is not the decoder's to know
  EXPECT_EQ(s.data.subset, (std::vector<int64_t>{1, 12}));
  try {
    scenario::check_scenario_inputs(s, tree);
    FAIL() << "expected the index 12 refused in a dataset of 10 images";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("data.subset: expected sample indices below the dataset's 10 samples, got 12"),
              std::string::npos)
        << e.what();
  }
  // Synthetic data says its size itself: refused while decoding.
  const Value synthetic = parse_yaml("name: t\ndata:\n  samples: 4\n  subset: [5]\n", "t.yaml");
  EXPECT_THROW((void)scenario::decode_scenario(synthetic, "t.yaml"), ScenarioError);
}

TEST_F(ScenarioFiles, TheChecksACallerPassesInRunLastAndOnlyWhenPassed) {
  const auto p = write("s.yaml", "name: s\nmodel:\n  weights: " + archive_file() + "\n");
  int calls = 0;
  scenario::InputChecks refuse;
  refuse.model_files = [&calls](const scenario::Scenario& s) -> std::optional<scenario::InputFileProblem> {
    ++calls;
    EXPECT_FALSE(s.model.weights.empty());
    return scenario::InputFileProblem{"model.weights", "weights of this model", "weights of another"};
  };
  EXPECT_NO_THROW((void)scenario::load_scenario(p));  // no checks passed: none run
  EXPECT_EQ(calls, 0);
  try {
    (void)scenario::load_scenario(p, {}, refuse);
    FAIL() << "expected the passed-in check's problem";
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("s.yaml:3:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.weights: expected weights of this model, got weights of another"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(calls, 1);
  // A user's own worker reads its own files: dbh's model check is not for it.
  const auto ext = write("e.yaml", "name: e\nworker:\n  command: [\"true\"]\nmodel:\n  weights: " + archive_file() + "\n");
  EXPECT_NO_THROW((void)scenario::load_scenario(ext, {}, refuse));
  EXPECT_EQ(calls, 1);
}

TEST(ApplyOverride, SetsCreatesAndReplaces) {
  Value root = parse_yaml("a:\n  b: 1\n  c: [x, y]\n", "t.yaml");
  apply_override(root, "a.b=2");
  apply_override(root, "a.c.1=z");
  apply_override(root, "new.deep.key=hello world");
  apply_override(root, "a.m={p: 1, q: [2]}");
  apply_override(root, "a.m={r: 3}");  // maps merge into maps
  apply_override(root, "e=");          // an empty string, not null
  EXPECT_EQ(root.find("a")->find("b")->scalar, "2");
  EXPECT_EQ(root.find("a")->find("c")->seq.at(1).scalar, "z");
  EXPECT_EQ(root.find("a")->find("c")->seq.at(0).scalar, "x");
  EXPECT_EQ(root.find("new")->find("deep")->find("key")->scalar, "hello world");
  const Value* m = root.find("a")->find("m");
  ASSERT_TRUE(m != nullptr && m->is_map());
  EXPECT_EQ(m->find("p")->scalar, "1");
  EXPECT_EQ(m->find("r")->scalar, "3");
  EXPECT_TRUE(root.find("e")->is_scalar());
  EXPECT_EQ(root.find("e")->scalar, "");
  EXPECT_EQ(root.find("a")->find("b")->loc.file.rfind("<override> a.b=", 0), 0u)
      << root.find("a")->find("b")->loc.file;
  EXPECT_THROW(apply_override(root, "a.c.2=w"), ScenarioError);
  EXPECT_THROW(apply_override(root, "a.c.x=w"), ScenarioError);
}

// yaml-cpp's multi-document reader never returns on some inputs holding a
// NUL byte (fuzzer inputs "\0," and "tag\0...\v..."): such bytes are refused
// before the parser runs, with where they are.
TEST(ParseYaml, RefusesControlBytesWithTheirPlace) {
  using namespace std::string_literals;
  for (const std::string& text : {"\0,"s, "a: 1\nb: x\x0by\n"s, "a: 1\n  \x7f\n"s, "tag\0\0\x0bx, , zy[=, d=\0\0]"s}) {
    try {
      (void)parse_yaml(text, "t.yaml");
      ADD_FAILURE() << "accepted " << ::testing::PrintToString(text);
    } catch (const ScenarioError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("t.yaml:", 0), 0u) << m;
      EXPECT_NE(m.find("expected text"), std::string::npos) << m;
      EXPECT_NE(m.find("got the byte 0x"), std::string::npos) << m;
    }
  }
  try {
    (void)parse_yaml("a: 1\nb: x\x0by\n", "t.yaml");
  } catch (const ScenarioError& e) {
    EXPECT_NE(std::string(e.what()).find("t.yaml:2:5"), std::string::npos) << e.what();
  }
  Value root = parse_yaml("a: 1\n", "t.yaml");
  EXPECT_THROW(apply_override(root, "a=\0,"s), ScenarioError);
  EXPECT_THROW(apply_override(root, "a=,"s), ScenarioError);
  // Tab, carriage return and UTF-8 text stay fine.
  EXPECT_EQ(parse_yaml("a:\t1\r\nb: \xc3\xa9t\xc3\xa9\n", "t.yaml").find("b")->scalar, "\xc3\xa9t\xc3\xa9");
}

// yaml-cpp ends a quoted string that is never closed at the end of the
// stream: the keys after it would silently become its text.
TEST(ParseYaml, AQuotedStringThatIsNeverClosedIsASyntaxError) {
  for (const std::string text : {"description: \"Check the run\ntrain:\n  max_steps: 1\n", "name: 'a\n",
                                 "a:\n  - x\n  - \"y\n"}) {
    try {
      (void)parse_yaml(text, "t.yaml");
      ADD_FAILURE() << "accepted " << ::testing::PrintToString(text);
    } catch (const ScenarioError& e) {
      EXPECT_NE(std::string(e.what()).find("a quoted string that is never closed"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_yaml("a: 'it''s'\n", "t.yaml").find("a")->scalar, "it's");
  EXPECT_EQ(parse_yaml("a: \"x \\\" y\"\n", "t.yaml").find("a")->scalar, "x \" y");
  EXPECT_EQ(parse_yaml("a: \"multi\n  line\"\n", "t.yaml").find("a")->scalar, "multi line");
}

// Numbers are decimal, as integers are: strtod would take hex floats.
TEST(ParseNumbers, DecimalOnly) {
  double v = 0;
  for (const char* ok : {"0.5", "+0.5", "1e-3", ".5", "5.", "-2", "1E3"}) EXPECT_TRUE(scenario::parse_double(ok, &v)) << ok;
  EXPECT_TRUE(scenario::parse_double("1e-3", &v) && v == 1e-3);
  for (const char* bad : {"0x1p3", "0x10", " 1", "1 ", "+-1", "nan", "inf", "1e400", "", "+", "1,5"}) {
    EXPECT_FALSE(scenario::parse_double(bad, &v)) << bad;
  }
}

// yaml-cpp 0.7 reports a document that consumes nothing, forever, for a lone
// "," (its YAML::LoadAll never returns): that is a syntax error with its place.
TEST(ParseYaml, ALoneCommaIsASyntaxErrorNotAHang) {
  for (const std::string text : {",", ",\n", "\n,\n", "# c\n  ,\n"}) {
    try {
      (void)parse_yaml(text, "t.yaml");
      ADD_FAILURE() << "accepted " << ::testing::PrintToString(text);
    } catch (const ScenarioError& e) {
      EXPECT_NE(std::string(e.what()).find("expected valid YAML"), std::string::npos) << e.what();
    }
  }
  try {
    (void)parse_yaml("\n  ,\n", "t.yaml");
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("t.yaml:2:3:", 0), 0u) << e.what();
  }
  // Documents after the first: empty ones are let be, one with settings is refused where they start.
  EXPECT_EQ(parse_yaml("a: 1\n---\n", "t.yaml").find("a")->scalar, "1");
  EXPECT_EQ(parse_yaml("---\na: 1\n...\n---\n", "t.yaml").find("a")->scalar, "1");
  try {
    (void)parse_yaml("a: 1\n---\nb: 2\n", "t.yaml");
    ADD_FAILURE() << "a second document was accepted";
  } catch (const ScenarioError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("t.yaml:3:1: expected one YAML document", 0), 0u) << e.what();
  }
}

// --- resolved JSON and hash ------------------------------------------------

std::vector<std::string> shipped_scenarios() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(DBH_SOURCE_DIR) / "scenarios")) {
    if (e.is_regular_file() && e.path().extension() == ".yaml") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void ExpectRoundTrip(const scenario::Scenario& s) {
  const std::string json = scenario::resolved_json(s);
  const scenario::Scenario back = scenario::decode_scenario(parse_yaml(json, "scenario.resolved.json"), "");
  EXPECT_EQ(scenario::resolved_json(back), json);
  EXPECT_EQ(scenario::scenario_hash(back), scenario::scenario_hash(s));
  EXPECT_EQ(to_json(back.resolved), to_json(s.resolved));
}

TEST(ResolvedJson, ShippedScenariosRoundTripThroughTheWorkersPath) {
  const auto files = shipped_scenarios();
  ASSERT_GE(files.size(), 5u);
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    ExpectRoundTrip(scenario::load_scenario(f));
  }
}

// The smallest file the checkpoint check accepts, for scenarios that name
// weights: a zip archive whose central directory names a LibTorch archive's
// `version` and `data.pkl` (empty entries). One per process: ctest runs
// these tests side by side, each removing its file when it exits.
std::string archive_file() {
  const std::string path = dbh::testing::removed_at_exit(::testing::TempDir() + "/dbh-scenario-test-weights-" +
                                                         std::to_string(::getpid()) + ".pt")
                               .string();
  auto le16 = [](size_t v) { return std::string{static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff)}; };
  auto le32 = [&](size_t v) { return le16(v & 0xffff) + le16(v >> 16); };
  std::string local, central;
  for (const std::string name : {"w/version", "w/data.pkl"}) {
    central += std::string("PK\x01\x02", 4) + std::string(24, '\0') + le16(name.size()) + le16(0) + le16(0) +
               std::string(8, '\0') + le32(local.size()) + name;
    local += std::string("PK\x03\x04", 4) + std::string(22, '\0') + le16(name.size()) + le16(0) + name;
  }
  const std::string end = std::string("PK\x05\x06", 4) + le16(0) + le16(0) + le16(2) + le16(2) +
                          le32(central.size()) + le32(local.size()) + le16(0);
  std::ofstream(path, std::ios::binary) << local << central << end;
  return path;
}

TEST_F(ScenarioFiles, EverySectionRoundTrips) {
  const auto p = write(
      "full.yaml",
      "name: full\ndescription: \"quotes \\\" and: colons, # hashes, ünïcödé, tab\\tend\"\n"
      "model: {encoder: resnet34, decoder: pan, k: 12.5, weights: " + archive_file() + "}\n"
      "data: {source: synthetic_random, batch_size: 3, size: 96, num_workers: 1, augment: yes,"
      " on_invalid: skip, validate: false, preflight: off}\n"
      "train: {max_steps: 7, optimizer: adam, lr: 1.0e-3, momentum: 0.8, weight_decay: 0,"
      " poly_power: 1, accumulation: 2, grad_clip: 5.5, precision: fp16, seed: 123456789012,"
      " threads: 1, checkpoint_every: 3}\n"
      "hardware: {device: 'cuda:1', cudnn_enabled: false, cudnn_benchmark: true,"
      " cudnn_deterministic: true, allow_tf32: true, memory_budget: 1.5GiB, profile: rtx3060-12gb}\n"
      "monitors: {mode: localise, loss_spike_factor: 10}\n"
      "faults:\n"
      "  - {name: cuda_error, kind: cuda_oom, module: decoder.merge3, sticky: true, at_step: 2}\n"
      "  - {name: memory_ballast, bytes: 512MiB, on: host, until_step: 4, run: 1}\n"
      "  - {name: nan_gradient, parameter: head.prob.conv.weight}\n"
      "repeat: {in_process: 2, processes: 3}\n"
      "limits: {deadline_s: 30.5, silence_s: 2, grace_s: 0}\n"
      "expect: {outcome: failed, failure_class: cuda_oom, step: 2, module: decoder,"
      " deterministic: false, max_peak_memory: 2GiB, data_dependent: true}\n"
      "controls:\n  - [data.source=synthetic_boxes, 'train.lr=0.5']\n  - hardware.device=cuda:0\n");
  const scenario::Scenario s = scenario::load_scenario(p);
  EXPECT_EQ(s.hardware.memory_budget, 1610612736);
  EXPECT_EQ(s.expect.max_peak_memory, int64_t{2} << 30);
  ASSERT_EQ(s.controls.size(), 2u);
  EXPECT_EQ(s.controls[0].size(), 2u);
  ExpectRoundTrip(s);
  // The resolved tree is the resolved JSON, parsed.
  EXPECT_EQ(to_json(s.resolved), to_json(parse_yaml(scenario::resolved_json(s), "x")));
}

TEST(ResolvedJson, HashIsSixteenHexDigitsAndIgnoresTheFileName) {
  const scenario::Scenario a = scenario::load_scenario(std::string(DBH_SOURCE_DIR) + "/scenarios/nan-activation.yaml");
  const std::string h = scenario::scenario_hash(a);
  EXPECT_TRUE(std::regex_match(h, std::regex("[0-9a-f]{16}"))) << h;
  scenario::Scenario b = a;
  b.file = "elsewhere.yaml";
  b.overrides = {"x=1"};
  EXPECT_EQ(scenario::scenario_hash(b), h);
}

TEST(ResolvedJson, HashChangesWhenAnyValueChanges) {
  const std::string path = std::string(DBH_SOURCE_DIR) + "/scenarios/nan-activation.yaml";
  const std::string base = scenario::scenario_hash(scenario::load_scenario(path));
  const std::vector<std::string> changes = {
      "name=other",
      "description=other",
      "model.encoder=resnet34",
      "model.decoder=pan",
      "model.k=51",
      "model.weights=" + archive_file(),
      "data.source=synthetic_random",
      "data.batch_size=3",
      "data.size=96",
      "data.num_workers=1",
      "data.augment=true",
      "data.on_invalid=skip",
      "data.validate=false",
      "data.preflight=false",
      "train.max_steps=5",
      "train.optimizer=adam",
      "train.lr=0.0071",
      "train.momentum=0.8",
      "train.weight_decay=0.001",
      "train.poly_power=1.0",
      "train.accumulation=2",
      "train.grad_clip=1",
      "train.seed=43",
      "train.threads=1",
      "train.checkpoint_every=2",
      "hardware.cudnn_enabled=false",
      "hardware.cudnn_benchmark=true",
      "hardware.cudnn_deterministic=true",
      "hardware.allow_tf32=true",
      "hardware.memory_budget=1GiB",
      "hardware.profile=rtx3060-12gb",
      "monitors.mode=localise",
      "monitors.loss_spike_factor=3",
      "faults.0.at_step=2",
      "faults.0.until_step=2",
      "faults.0.run=0",
      "faults.0.module=decoder.smooth2",
      "repeat.in_process=2",
      "repeat.processes=2",
      "limits.deadline_s=301",
      "limits.silence_s=61",
      "limits.grace_s=4",
      "expect.outcome=passed",
      "expect.failure_class=hang",
      "expect.step=2",
      "expect.module=head",
      "expect.loss_drop=0.5",
      "expect.max_peak_memory=1GiB",
      "expect.data_dependent=false",
      "controls=[[data.size=32]]",
  };
  std::set<std::string> seen = {base};
  for (const auto& c : changes) {
    SCOPED_TRACE(c);
    const std::string h = scenario::scenario_hash(scenario::load_scenario(path, {c}));
    EXPECT_NE(h, base);
    EXPECT_TRUE(seen.insert(h).second) << "two different changes gave the same hash";
  }
  // The same values written differently hash the same.
  EXPECT_EQ(scenario::scenario_hash(scenario::load_scenario(path, {"model.encoder=18", "train.lr=7e-3"})), base);
}

// --- sizes -----------------------------------------------------------------

TEST(ParseBytes, UnitsAndPlainNumbers) {
  EXPECT_EQ(scenario::parse_bytes("512MiB"), int64_t{512} * 1024 * 1024);
  EXPECT_EQ(scenario::parse_bytes("12GB"), int64_t{12} * 1000 * 1000 * 1000);
  EXPECT_EQ(scenario::parse_bytes("1.5GiB"), int64_t{3} << 29);
  EXPECT_EQ(scenario::parse_bytes("4096"), 4096);
  EXPECT_EQ(scenario::parse_bytes("0"), 0);
  EXPECT_EQ(scenario::parse_bytes("64KiB"), 65536);
  EXPECT_EQ(scenario::parse_bytes("2KB"), 2000);
  EXPECT_EQ(scenario::parse_bytes("3B"), 3);
  EXPECT_EQ(scenario::parse_bytes("1 GiB"), int64_t{1} << 30);
  EXPECT_EQ(scenario::parse_bytes("1_000"), 1000);
  EXPECT_EQ(scenario::parse_bytes("2G"), int64_t{2} << 30);
}

TEST(ParseBytes, RejectsWhatIsNotASize) {
  for (const char* bad : {"", " ", "abc", "12XB", "MiB", "-1", "-5MiB", "1e30TiB", "12 parsecs",
                          "nan", "inf", "1.5.5GiB", "12gb", "0x10", "0x1p30", "0X10GiB"}) {
    EXPECT_FALSE(scenario::parse_bytes(bad).has_value()) << "\"" << bad << "\"";
  }
}

TEST(FormatBytes, PicksTheLargestBinaryUnit) {
  EXPECT_EQ(scenario::format_bytes(0), "0 B");
  EXPECT_EQ(scenario::format_bytes(1023), "1023 B");
  EXPECT_EQ(scenario::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(scenario::format_bytes(int64_t{96} << 20), "96.0 MiB");
  EXPECT_EQ(scenario::parse_bytes(scenario::format_bytes(int64_t{3} << 30)), int64_t{3} << 30);
}

TEST(EditDistance, CountsEdits) {
  EXPECT_EQ(scenario::edit_distance("", ""), 0u);
  EXPECT_EQ(scenario::edit_distance("abc", ""), 3u);
  EXPECT_EQ(scenario::edit_distance("encodr", "encoder"), 1u);
  EXPECT_EQ(scenario::edit_distance("fnp", "fpn"), 2u);
  EXPECT_EQ(scenario::edit_distance("kitten", "sitting"), 3u);
}

TEST(KnownModuleNames, DecodersDifferOnlyInTheirDecoderModules) {
  const auto& fpn = model::observed_modules(model::DecoderKind::kFpn);
  const auto& pan = model::observed_modules(model::DecoderKind::kPan);
  EXPECT_NE(std::find(fpn.begin(), fpn.end(), "decoder.fusion"), fpn.end());
  EXPECT_NE(std::find(pan.begin(), pan.end(), "decoder.merge3"), pan.end());
  EXPECT_EQ(std::find(fpn.begin(), fpn.end(), "decoder.merge3"), fpn.end());
  for (const auto* names : {&fpn, &pan}) {
    EXPECT_NE(std::find(names->begin(), names->end(), "encoder.layer4"), names->end());
    EXPECT_NE(std::find(names->begin(), names->end(), "head.binarize"), names->end());
  }
}

// Note [dbh owns its names]: a worker's environment may not set dbh's own
// variables or names that are not variable names, and worker.keys maps keys
// of dbh's table to one word of the user's command.
TEST_F(ScenarioFiles, WorkerNamesAreDbhsToCheck) {
  const std::string base = "worker:\n  command: [python, train.py]\n";
  const auto error = [&](const std::string& name, const std::string& extra) {
    return load_error(write(name, base + extra));
  };
  std::string e = error("fd.yaml", "  env: {DBH_EVENT_FD: \"7\"}\n");
  EXPECT_NE(e.find("fd.yaml:3"), std::string::npos) << e;
  EXPECT_NE(e.find("worker.env.DBH_EVENT_FD: expected a variable of the training's own"), std::string::npos) << e;
  e = error("pid.yaml", "  env: {DBH_SUPERVISOR_PID: \"1\"}\n");
  EXPECT_NE(e.find("the DBH_ names are dbh's"), std::string::npos) << e;
  e = error("eq.yaml", "  env: {\"A=B\": x}\n");
  EXPECT_NE(e.find("expected a variable name ([A-Za-z_][A-Za-z0-9_]*), got \"A=B\""), std::string::npos) << e;
  e = error("space.yaml", "  env: {\"MY VAR\": x}\n");
  EXPECT_NE(e.find("expected a variable name"), std::string::npos) << e;
  e = error("lrr.yaml", "  keys: {train.lrr: optimizer.lr}\n");
  EXPECT_NE(e.find("worker.keys.\"train.lrr\": expected a key of dbh's scenario"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean \"train.lr\"?"), std::string::npos) << e;
  e = error("word.yaml", "  keys: {train.lr: \"optimizer.lr=3\"}\n");
  EXPECT_NE(e.find("worker.keys.train.lr: expected the key it reaches the command as"), std::string::npos) << e;
  // What is fine stays fine: the user's own variables, flags, and "" for not passed.
  EXPECT_EQ(error("ok.yaml", "  env: {OMP_NUM_THREADS: \"1\", _X1: y}\n  keys: {train.lr: --lr, train.seed: \"\"}\n"), "");
}

// Note [The user's own names]: for the user's own command a key under the
// training's sections that is none of dbh's and no misspelling of one, and a
// Lightning key dbh cannot honour in its own worker, are the user's
// training's (worker.overrides); a misspelt key of dbh's is still an error.
TEST_F(ScenarioFiles, AnExternalWorkersOwnModelAndTrainerKeysPassThrough) {
  const std::string file = write("ext.yaml", "worker:\n  command: [python, train.py, fit]\n  syntax: flags\n");
  const scenario::Scenario s = scenario::load_scenario(
      file, {"model.cutoff=1.01", "trainer.val_check_interval=1", "trainer.max_steps=4"});
  EXPECT_EQ(s.worker.overrides.at("model.cutoff"), "1.01");
  EXPECT_EQ(s.worker.overrides.at("trainer.val_check_interval"), "1");
  EXPECT_EQ(s.train.max_steps, 4) << "a key the alias table maps stays dbh's";
  EXPECT_EQ(s.worker.overrides.count("trainer.max_steps"), 0u);
  EXPECT_THROW((void)scenario::load_scenario(file, {"data.batch_sise=2"}), ScenarioError);
  EXPECT_THROW((void)scenario::load_scenario(file, {"train.lrr=2"}), ScenarioError);
  const scenario::Scenario own = scenario::load_scenario(file, {"data.order_seed=-1", "train.data_dir=/d"});
  EXPECT_EQ(own.worker.overrides.at("data.order_seed"), "-1");
  EXPECT_EQ(own.worker.overrides.at("train.data_dir"), "/d");
  // dbh's own worker: model.cutoff is a misspelt key of dbh's model.
  EXPECT_THROW((void)scenario::load_scenario(write("own.yaml", "name: own\n"), {"model.cutoff=1"}), ScenarioError);
}

// A Lightning key the alias table maps to a dbh key this worker never
// receives (train.grad_clip: not passed by default, no worker.keys entry)
// reaches the user's command as written; with worker.keys naming a key for
// it, it is dbh's, passed under that name; for dbh's own worker, dbh's.
TEST_F(ScenarioFiles, ALightningKeyWhoseDbhKeyTheWorkerNeverReceivesIsPassedAsWritten) {
  const std::string file = write("lit.yaml", "worker:\n  command: [python, train.py]\n");
  const scenario::Scenario s = scenario::load_scenario(file, {"trainer.gradient_clip_val=1e-12"});
  EXPECT_EQ(s.worker.overrides.at("trainer.gradient_clip_val"), "1e-12");
  EXPECT_EQ(s.train.grad_clip, 0.0) << "dbh's own value stays as the scenario holds it";
  const std::string keyed =
      write("keyed.yaml", "worker:\n  command: [python, train.py]\n  keys: {train.grad_clip: optim.clip}\n");
  const scenario::Scenario k = scenario::load_scenario(keyed, {"trainer.gradient_clip_val=0.5"});
  EXPECT_EQ(k.train.grad_clip, 0.5);
  EXPECT_EQ(k.worker.overrides.count("trainer.gradient_clip_val"), 0u);
  const scenario::Scenario own = scenario::load_scenario(write("own.yaml", "name: own\n"), {"trainer.gradient_clip_val=2"});
  EXPECT_EQ(own.train.grad_clip, 2.0);
  EXPECT_TRUE(own.worker.overrides.empty());
}

// diagnose's repro.yaml: `include:` the scenario plus the layer its
// overrides changed loads as the scenario with the overrides, whatever their
// names (worker.keys' user key, a key of the user's own, an alias, a dbh key).
TEST_F(ScenarioFiles, TheOverrideLayerIncludedReproducesTheOverrides) {
  const std::string file =
      write("ext.yaml", "worker:\n  command: [python, train.py]\n  keys: {train.lr: optim.step_size}\n"
                        "train: {max_steps: 3}\n");
  const std::vector<std::string> overrides = {"optim.step_size=50", "arch.width=6", "trainer.max_steps=5",
                                              "data.size=96", "controls=[]"};
  const Value layer = scenario::override_layer(file, overrides);
  EXPECT_EQ(layer.find("optim"), nullptr) << to_json(layer);
  std::string text = "include: " + file + "\n";
  for (const auto& [key, value] : layer.map) text += key + ": " + to_json(value, -1) + "\n";
  const scenario::Scenario repro = scenario::load_scenario(write("repro.yaml", text));
  const scenario::Scenario direct = scenario::load_scenario(file, overrides);
  EXPECT_EQ(repro.train.lr, 50);
  EXPECT_EQ(repro.train.lr, direct.train.lr);
  EXPECT_EQ(repro.train.max_steps, 5);
  EXPECT_EQ(repro.data.size, 96);
  EXPECT_EQ(repro.worker.overrides, direct.worker.overrides);
  // Only what changed: the file's own keys are the include's.
  EXPECT_EQ(layer.find("worker")->find("command"), nullptr) << to_json(layer);
}

// Note [A command's own syntax]: worker.written_as holds places in the
// command, worker.syntax file names a word of it.
TEST_F(ScenarioFiles, WrittenAsAndTheSyntaxOptionAreChecked) {
  const std::string base = "worker:\n  command: [python, train.py, exp.yaml]\n";
  std::string e = load_error(write("w1.yaml", base + "  written_as: {lr: \"lr\"}\n"));
  EXPECT_NE(e.find("w1.yaml:3"), std::string::npos) << e;
  EXPECT_NE(e.find("worker.written_as.lr: expected `--option`"), std::string::npos) << e;
  e = load_error(write("w2.yaml", base + "  written_as: {data: \"@7\"}\n"));
  EXPECT_NE(e.find("a word of worker.command after the program (2 to 2), got word 7"), std::string::npos) << e;
  e = load_error(write("w3.yaml", base + "  syntax: option\n"));
  EXPECT_NE(e.find("worker.syntax_option: expected the option your command takes"), std::string::npos) << e;
  e = load_error(write("w4.yaml", base + "  syntax: file\n  syntax_option: \"-o\"\n"));
  EXPECT_NE(e.find("worker.syntax_option: expected @N"), std::string::npos) << e;
  EXPECT_EQ(load_error(write("ok.yaml", base + "  syntax: file\n  syntax_option: \"@2\"\n  written_as: {lr: --lr}\n")),
            "");
}

}  // namespace
}  // namespace dbh::harness
