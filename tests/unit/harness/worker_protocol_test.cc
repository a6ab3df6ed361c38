// The worker contract as declared (harness/supervisor/worker_contract.h), as
// documented (docs/worker-protocol.md) and as the Python adapter spells it
// (python/dbh_adapter) cannot drift apart; what a scenario needs of its
// worker and what reaches the user's command are computed from the scenario.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/proto/event_types.h"
#include "harness/proto/events.h"
#include "harness/scenario/aliases.h"
#include "harness/scenario/fault_catalog.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/supervisor/worker_contract.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"

namespace dbh::harness {
namespace {

std::string doc() { return testing::read_text(std::string(DBH_SOURCE_DIR) + "/docs/worker-protocol.md"); }

// The rows of the table whose header row starts with `header`, each as its
// cells (trimmed, backticks kept).
std::vector<std::vector<std::string>> table_after(const std::string& text, const std::string& header) {
  std::vector<std::vector<std::string>> rows;
  const size_t at = text.find(header);
  EXPECT_NE(at, std::string::npos) << "no table with header " << header;
  if (at == std::string::npos) return rows;
  std::istringstream lines(text.substr(at));
  std::string line;
  std::getline(lines, line);  // the header
  std::getline(lines, line);  // |---|
  while (std::getline(lines, line) && line.rfind("|", 0) == 0) {
    std::vector<std::string> cells;
    std::string cell;
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '|') {
        const size_t b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
        cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
        cell.clear();
      } else {
        cell += line[i];
      }
    }
    rows.push_back(cells);
  }
  return rows;
}

std::string unticked(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '`'), s.end());
  return s;
}

TEST(WorkerProtocol, DocListsEveryVariableDbhSets) {
  std::set<std::string> documented;
  for (const auto& row : table_after(doc(), "| variable | value |")) documented.insert(unticked(row.at(0)));
  const std::set<std::string> declared = {supervisor::worker_env::kProtocol, supervisor::worker_env::kEventFd,    supervisor::worker_env::kScenario,
                                          supervisor::worker_env::kScenarioHash, supervisor::worker_env::kTrialDir, supervisor::worker_env::kTrial,
                                          supervisor::worker_env::kDescribe, "DBH_SUPERVISOR_PID", "DBH_TRIAL_TOKEN"};
  EXPECT_EQ(documented, declared);
  // The spec a trial is started with sets each of them but the describe flag.
  scenario::Scenario s;
  s.worker.command = {"python", "train.py"};
  s.worker.cwd = "/tmp";
  const supervisor::TrialSpec spec = supervisor::external_trial_spec(s, "/tmp/x/scenario.resolved.json", "/tmp/x", 3);
  std::set<std::string> set;
  for (const auto& [name, value] : spec.env) set.insert(name);
  for (const auto& name : declared) {
    if (name == supervisor::worker_env::kDescribe || name == std::string("DBH_SUPERVISOR_PID") ||
        name == std::string("DBH_TRIAL_TOKEN")) {
      continue;  // run_trial's own, set for every trial
    }
    EXPECT_TRUE(set.count(name)) << name << " is documented but not set";
  }
  EXPECT_EQ(spec.cwd, "/tmp");
  EXPECT_EQ(spec.argv.front(), "python");
}

TEST(WorkerProtocol, DocListsEveryCapabilityWithItsMeaning) {
  std::vector<std::pair<std::string, std::string>> documented;
  for (const auto& row : table_after(doc(), "| capability | what a worker that lists it does | `dbh_adapter` |")) {
    documented.emplace_back(unticked(row.at(0)), row.at(1));
    // The Python adapter's column says how it serves each one.
    EXPECT_FALSE(row.at(2).empty()) << row.at(0) << ": the table does not say how the adapter serves it";
  }
  std::vector<std::pair<std::string, std::string>> declared;
  for (const auto& c : supervisor::worker_capabilities()) declared.emplace_back(c.name, c.needed_for);
  EXPECT_EQ(documented, declared) << "docs/worker-protocol.md's capability table and worker_capabilities() differ";
}

TEST(WorkerProtocol, DocListsThePassedKeysAndTheirDefaults) {
  scenario::Scenario s;
  s.worker.command = {"python", "train.py"};
  s.data.source = scenario::DataSource::kReal;
  s.data.path = "/data";
  s.worker.keys[DBH_SCENARIO_KEY(data.path)] = "datasets.train.path";
  std::vector<std::string> documented_keys;
  for (const auto& row : table_after(doc(), "| dbh key | your key (default) | value |")) {
    documented_keys.push_back(unticked(row.at(0)));
  }
  std::vector<std::string> passed;
  for (const auto& k : supervisor::passed_keys(s)) passed.push_back(k.dbh_key);
  EXPECT_EQ(documented_keys, passed);
  for (const auto& row : table_after(doc(), "| dbh key | your key (default) | value |")) {
    const std::string key = unticked(row.at(0));
    if (key == DBH_SCENARIO_KEY(data.path)) continue;
    for (const auto& k : supervisor::passed_keys(s)) {
      if (k.dbh_key == key) {
        EXPECT_EQ(unticked(row.at(1)), k.user_key) << key;
      }
    }
  }
}

// Generated samples are served through the training's own dataset, which
// still reads its folder: the folder is passed whatever data.source says.
TEST(WorkerProtocol, TheDatasetFolderIsPassedForGeneratedDataToo) {
  scenario::Scenario s;
  s.worker.command = {"python", "train.py"};
  s.worker.keys[DBH_SCENARIO_KEY(data.path)] = "dataset.root";
  const auto folder_passed = [&] {
    for (const auto& k : supervisor::passed_keys(s)) {
      if (k.dbh_key == DBH_SCENARIO_KEY(data.path)) return k.user_key == "dataset.root";
    }
    return false;
  };
  for (const auto source : {scenario::DataSource::kReal, scenario::DataSource::kSyntheticBoxes,
                            scenario::DataSource::kSyntheticRandom}) {
    s.data.source = source;
    s.data.path = "";
    EXPECT_FALSE(folder_passed()) << to_string(source) << ": no folder, nothing passed";
    s.data.path = "/data";
    EXPECT_TRUE(folder_passed()) << to_string(source);
  }
}

TEST(WorkerProtocol, PassedValuesAreWrittenAsTheUsersCommandLineWritesThem) {
  scenario::Scenario s;
  s.worker.command = {"python", "train.py"};
  s.train.precision = model::Precision::kBf16;
  s.hardware.device = "cuda:1";
  s.data.batch_size = 4;
  s.worker.keys[DBH_SCENARIO_KEY(train.seed)] = "";           // not passed
  s.worker.keys[DBH_SCENARIO_KEY(data.size)] = "img_size";    // passed under the user's name
  const supervisor::TrialSpec spec = supervisor::external_trial_spec(s, "/r.json", "/tmp/t", 0);
  const auto has = [&](const std::string& a) { return std::count(spec.argv.begin(), spec.argv.end(), a) == 1; };
  EXPECT_TRUE(has("trainer.precision=bf16-mixed"));
  EXPECT_TRUE(has("trainer.accelerator=gpu"));
  EXPECT_TRUE(has("dataloaders.train_dataloader.batch_size=4"));
  EXPECT_TRUE(has("img_size=128"));
  EXPECT_TRUE(std::none_of(spec.argv.begin(), spec.argv.end(), [](const std::string& a) { return a.rfind("seed=", 0) == 0; }));
  // Synthetic data has no path to pass.
  EXPECT_TRUE(std::none_of(spec.argv.begin(), spec.argv.end(), [](const std::string& a) { return a.find("path") != std::string::npos; }));
}

// Note [One flattening of a worker's configuration]: a nested configuration
// is read as a flat one, by the mapping and by the confirmation alike; every
// spelling of a key is held to the value passed, and a configuration cut
// before a passed key cannot confirm it.
TEST(WorkerProtocol, ANestedConfigurationIsConfirmedAsAFlatOne) {
  scenario::Scenario s;
  s.worker.command = {"python", "train.py"};
  s.train.lr = 0.5;
  s.worker.keys[DBH_SCENARIO_KEY(train.lr)] = "optim.lr";
  const auto flat = [](const std::string& text) { return proto::flatten_config(nlohmann::json::parse(text)); };
  EXPECT_EQ(supervisor::keys_not_applied(s, flat(R"({"optim": {"lr": 0.5}})")), "");
  EXPECT_EQ(supervisor::keys_not_applied(s, flat(R"({"optim.lr": 0.5})")), "");
  EXPECT_NE(supervisor::keys_not_applied(s, flat(R"({"optim": {"lr": 0.1}})")).find("holds \"optim.lr=0.1\""),
            std::string::npos);
  // Both spellings: the one that differs is found, whichever comes first.
  EXPECT_NE(supervisor::keys_not_applied(s, flat(R"({"optim.lr": 0.5, "optim": {"lr": 0.1}})")), "");
  EXPECT_NE(supervisor::keys_not_applied(s, flat(R"({"optim": {"lr": 0.1}, "optim.lr": 0.5})")), "");
  // Nulls and long values left out, keys and values as sent (a line break
  // stays one: escaping is for output).
  const auto f = flat(R"({"b": {"x\n::error::y": 1, "n": null, "long": ")" + std::string(2000, 'v') +
                      R"("}, "a": [1, 2]})");
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_EQ(f.entries[0].first, "a");
  EXPECT_EQ(f.entries[1].first, "b.x\n::error::y");
  EXPECT_FALSE(f.cut);
  // Past the bound: cut, and a passed key it lost is not confirmed.
  nlohmann::json many = nlohmann::json::object();
  for (size_t i = 0; i <= proto::kMaxConfigKeys; ++i) many["pad" + std::to_string(100000 + i)] = 0;
  many["zz"] = nlohmann::json{{"optim.lr", 0.1}};
  const auto cut = proto::flatten_config(many);
  EXPECT_TRUE(cut.cut);
  EXPECT_EQ(cut.entries.size(), proto::kMaxConfigKeys);
  s.worker.keys[DBH_SCENARIO_KEY(train.lr)] = "zz.optim.lr";
  EXPECT_NE(supervisor::keys_not_applied(s, cut).find("cannot be confirmed"), std::string::npos);
}

// Note [Keys that never reach the worker]: a training key the worker is not
// passed changes nothing in its training, and says how to pass it; passed
// keys, dbh's own sections and the keys a capability serves do reach it.
TEST(WorkerProtocol, AKeyTheWorkerIsNeverPassedIsNamedWithTheLineThatPassesIt) {
  scenario::Scenario s;
  EXPECT_EQ(supervisor::key_not_passed(s, DBH_SCENARIO_KEY(train.grad_clip)), "") << "dbh's own worker reads every key";
  s.worker.command = {"python", "train.py"};
  s.worker.keys[DBH_SCENARIO_KEY(train.lr)] = "optim.step_size";
  s.worker.keys[DBH_SCENARIO_KEY(train.seed)] = "";
  const std::string why = supervisor::key_not_passed(s, DBH_SCENARIO_KEY(train.grad_clip));
  EXPECT_NE(why.find("train.grad_clip is not passed to the worker python train.py"), std::string::npos) << why;
  EXPECT_NE(why.find("worker.keys: {train.grad_clip: <your key>}"), std::string::npos) << why;
  EXPECT_NE(supervisor::key_not_passed(s, DBH_SCENARIO_KEY(train.seed)).find("maps it to \"\""), std::string::npos);
  for (const char* reached : {DBH_SCENARIO_KEY(train.lr), DBH_SCENARIO_KEY(data.batch_size),
                              DBH_SCENARIO_KEY(train.stop_after), DBH_SCENARIO_KEY(data.subset), "limits.deadline_s",
                              "monitors.mode", "faults.0.step", "controls", "expect.outcome"}) {
    EXPECT_EQ(supervisor::key_not_passed(s, reached), "") << reached;
  }
  EXPECT_EQ(supervisor::overrides_not_passed(s, {"train.lr=5", "controls=[]"}), "");
  EXPECT_EQ(supervisor::overrides_not_passed(s, {"train.lr=5", "train.grad_clip=1"}), why);
  s.worker.keys[DBH_SCENARIO_KEY(train.grad_clip)] = "optim.clip";
  EXPECT_EQ(supervisor::key_not_passed(s, DBH_SCENARIO_KEY(train.grad_clip)), "");
}

// Note [The user's own names]: a refusal names a passed key only in the
// error itself. argparse prints its usage, every option in it, before any
// error, so an error about another option never blames `--bs`.
TEST(WorkerProtocol, ARefusalNamesAPassedKeyOnlyInItsErrorAsAWord) {
  scenario::Scenario s;
  s.worker.command = {"python", "train.py"};
  s.worker.syntax = scenario::CommandSyntax::kFlags;
  s.worker.keys[DBH_SCENARIO_KEY(data.batch_size)] = "bs";
  const std::string usage =
      "usage: train.py [-h] [--steps STEPS] [--bs BS] [--ink INK] folder\n";
  EXPECT_EQ(supervisor::refused_key_hint(s, usage + "train.py: error: argument --ink: invalid float value: 'x'\n"),
            "");
  EXPECT_NE(supervisor::refused_key_hint(s, usage + "train.py: error: argument --bs: invalid int value: 'x'\n")
                .find("the command names `bs`, which dbh passed for data.batch_size"),
            std::string::npos);
  // Hydra's refusal has no usage: the whole text is the error, the key a word of it, not a part of one.
  EXPECT_NE(supervisor::refused_key_hint(s, "Could not override 'bs'.\nKey 'bs' is not in struct\n")
                .find("the command names `bs`"),
            std::string::npos);
  EXPECT_EQ(supervisor::refused_key_hint(s, "Could not override 'absolute'.\n"), "");
}

TEST(WorkerProtocol, EachScenarioSettingNeedsItsCapability) {
  scenario::Scenario s;
  s.worker.command = {"python", "train.py"};
  s.data.source = scenario::DataSource::kReal;
  s.monitors.mode = scenario::MonitorMode::kOff;
  EXPECT_TRUE(supervisor::worker_needs(s).required.empty());
  s.data.subset = {1, 2};
  s.train.stop_after = 3;
  s.train.checkpoint_every = 1;
  s.train.resume_from = "/x.pt";
  s.hardware.memory_budget = 1 << 30;
  s.repeat.processes = 2;
  scenario::FaultConfig f;
  f.name = "nan_activation";
  s.faults.push_back(f);
  std::set<std::string> caps;
  for (const auto& [cap, what] : supervisor::worker_needs(s).required) caps.insert(cap);
  EXPECT_EQ(caps, (std::set<std::string>{"fault:nan_activation", supervisor::capability::kSubset, supervisor::capability::kStopAfter,
                                         supervisor::capability::kCheckpoint, supervisor::capability::kResume, supervisor::capability::kMemoryBudget,
                                         supervisor::capability::kLossBits}));
  s.monitors.mode = scenario::MonitorMode::kLocalise;
  caps.clear();
  for (const auto& [cap, what] : supervisor::worker_needs(s).required) caps.insert(cap);
  EXPECT_TRUE(caps.count(supervisor::capability::kMonitorsLocalise));
  EXPECT_FALSE(supervisor::worker_needs(s).optional.empty()) << "the silent checks are optional";
}

TEST(WorkerProtocol, ThePythonAdapterSpellsTheSameNames) {
  const std::string root = std::string(DBH_SOURCE_DIR) + "/python/dbh_adapter/";
  const std::string protocol = testing::read_text(root + "_protocol.py");
  for (const char* name : {supervisor::worker_env::kProtocol, supervisor::worker_env::kEventFd, supervisor::worker_env::kScenario,
                           supervisor::worker_env::kScenarioHash, supervisor::worker_env::kTrialDir, supervisor::worker_env::kTrial,
                           supervisor::worker_env::kDescribe}) {
    EXPECT_NE(protocol.find(std::string("\"") + name + "\""), std::string::npos) << name << " not in _protocol.py";
  }
  EXPECT_NE(protocol.find("PROTOCOL_VERSION = " + std::to_string(supervisor::kWorkerProtocolVersion)), std::string::npos);
  // Every capability and fault the adapter claims is one dbh knows.
  const std::string session = testing::read_text(root + "_session.py");
  const std::string faults = testing::read_text(root + "_faults.py");
  std::vector<std::string> known;
  for (const auto& c : supervisor::worker_capabilities()) known.push_back(c.name);
  const size_t at = session.find("BASE_CAPABILITIES = (");
  ASSERT_NE(at, std::string::npos);
  const std::string list = session.substr(at, session.find(')', at) - at);
  for (size_t q = list.find('"'); q != std::string::npos; q = list.find('"', list.find('"', q + 1) + 1)) {
    const std::string cap = list.substr(q + 1, list.find('"', q + 1) - q - 1);
    EXPECT_NE(std::find(known.begin(), known.end(), cap), known.end()) << cap << " is not a capability of the contract";
  }
  const size_t fat = faults.find("SUPPORTED = (");
  ASSERT_NE(fat, std::string::npos);
  const std::string flist = faults.substr(fat, faults.find(')', fat) - fat);
  int n = 0;
  for (size_t q = flist.find('"'); q != std::string::npos; q = flist.find('"', flist.find('"', q + 1) + 1)) {
    const std::string name = flist.substr(q + 1, flist.find('"', q + 1) - q - 1);
    EXPECT_NE(scenario::find_fault(name), nullptr) << name << " is not a dbh fault";
    EXPECT_NE(doc().find("`" + name + "`"), std::string::npos) << name << ": the doc's adapter list misses it";
    ++n;
  }
  EXPECT_GT(n, 3);
}

// Note [Lightning's values, once]: every dbh precision and device has one row;
// the alias table reads every spelling of a row as its dbh value; the worker
// contract passes the row's own spelling; and the adapter's `_PRECISION` is
// the table, rendered.
TEST(WorkerProtocol, LightningsValuesHaveOneSourceOnBothSides) {
  const auto& precisions = scenario::lightning_precisions();
  for (const std::string& name : model::precision_names()) {
    ASSERT_NE(scenario::lightning_value_for(precisions, name), nullptr) << name << " has no Lightning spelling";
  }
  const std::pair<const char*, const std::vector<scenario::LightningValue>*> tables[] = {
      {"trainer.precision", &precisions}, {"trainer.accelerator", &scenario::lightning_accelerators()}};
  for (const auto& [alias, table] : tables) {
    for (const scenario::LightningValue& row : *table) {
      std::vector<const char*> spellings = {row.passed};
      spellings.insert(spellings.end(), row.also.begin(), row.also.end());
      for (const char* word : spellings) {
        const auto t = scenario::translate_alias(alias, word);
        ASSERT_TRUE(t.has_value()) << alias;
        EXPECT_EQ(t->value, row.dbh) << alias << "=" << word;
      }
    }
  }
  for (const scenario::LightningValue& row : precisions) {
    scenario::Scenario s;
    s.worker.command = {"python", "train.py"};
    s.train.precision = model::precision_from_string(row.dbh);
    const auto argv = supervisor::external_trial_spec(s, "/r.json", "/tmp/t", 0).argv;
    EXPECT_EQ(std::count(argv.begin(), argv.end(), std::string("trainer.precision=") + row.passed), 1) << row.dbh;
  }
  std::string rendered = "_PRECISION = {";
  for (const scenario::LightningValue& row : precisions) {
    rendered += std::string(&row == &precisions.front() ? "" : ", ") + "\"" + row.dbh + "\": (\"" + row.passed + "\"";
    for (const char* a : row.also) rendered += std::string(", \"") + a + "\"";
    rendered += ")";
  }
  rendered += "}";
  const std::string lightning = testing::read_text(std::string(DBH_SOURCE_DIR) + "/python/dbh_adapter/lightning.py");
  EXPECT_NE(lightning.find(rendered), std::string::npos) << "python/dbh_adapter/lightning.py should hold " << rendered;
}

// The bounds both sides read: the adapter keeps its `hello` within dbh's
// event line bound, and reports no more parser options than dbh reads.
TEST(WorkerProtocol, ThePythonAdapterKeepsDbhsBounds) {
  const std::string root = std::string(DBH_SOURCE_DIR) + "/python/dbh_adapter/";
  const std::string events = testing::read_text(root + "_events.py");
  ASSERT_EQ(proto::kMaxEventLineBytes, size_t{1} << 20) << "the adapter's _events.py spells it so: change both";
  EXPECT_NE(events.find("MAX_EVENT_LINE_BYTES = 1 << 20"), std::string::npos);
  EXPECT_NE(events.find("MAX_EVENT_DEPTH = " + std::to_string(proto::kMaxEventDepth)), std::string::npos);
  const std::string parser = testing::read_text(root + "_parser.py");
  EXPECT_NE(parser.find("MAX_OPTIONS = " + std::to_string(scenario::kMaxParserOptions)), std::string::npos);
  EXPECT_NE(parser.find("MAX_STRINGS = " + std::to_string(scenario::kMaxParserOptionStrings)), std::string::npos);
  EXPECT_NE(parser.find("MAX_STRING = " + std::to_string(scenario::kMaxParserOptionBytes)), std::string::npos);
}

// One spelling for every "(your `…`)" of the reports: the command's own key,
// value and syntax for a key dbh passes, nothing for one it does not pass or
// for dbh's own worker.
TEST(WorkerProtocol, AnOverrideIsWrittenAsTheCommandWritesIt) {
  scenario::Scenario s;
  s.worker.command = {"python", "train.py"};
  s.worker.keys[DBH_SCENARIO_KEY(train.lr)] = "lr";
  s.worker.keys[DBH_SCENARIO_KEY(train.seed)] = "";  // not passed
  EXPECT_EQ(supervisor::as_the_command_writes(s, "train.lr=0.01"), "lr=0.01");
  EXPECT_EQ(supervisor::as_the_command_writes(s, "train.precision=fp32"), "trainer.precision=32-true");
  EXPECT_EQ(supervisor::as_the_command_writes(s, "train.seed=3"), std::nullopt);
  EXPECT_EQ(supervisor::as_the_command_writes(s, "train.lr"), std::nullopt);  // not key=value
  s.worker.syntax = scenario::CommandSyntax::kFlags;
  EXPECT_EQ(supervisor::as_the_command_writes(s, "train.lr=0.01"), "--lr 0.01");
  s.worker.command.clear();  // dbh's own worker takes dbh's keys
  EXPECT_EQ(supervisor::as_the_command_writes(s, "train.lr=0.01"), std::nullopt);
}

}  // namespace
}  // namespace dbh::harness
