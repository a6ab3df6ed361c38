// The scenario key table (harness/scenario/schema.h): every key reads its
// own default back, appears in the resolved JSON, rejects a wrong type naming
// itself, and docs/scenario-keys.md is what the table generates.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"
#include "harness/common/value.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"

namespace dbh::harness {
namespace {

// A scenario of the defaults with `overrides` applied, as `dbh run` reads it.
scenario::Scenario with(const std::vector<std::string>& overrides) {
  Value tree;
  for (const auto& o : overrides) apply_override(tree, o);
  return scenario::decode_scenario(tree, "");
}

// The ScenarioError's message for `overrides` ("" when they load).
std::string error_of(const std::vector<std::string>& overrides) {
  try {
    (void)with(overrides);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "";
}

// The value at the dotted `key` of a JSON object, or null.
const nlohmann::json* at(const nlohmann::json& j, const std::string& key) {
  const nlohmann::json* v = &j;
  size_t begin = 0;
  for (;;) {
    const size_t dot = key.find('.', begin);
    const std::string part = key.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (!v->is_object() || !v->contains(part)) return nullptr;
    v = &(*v)[part];
    if (dot == std::string::npos) return v;
    begin = dot + 1;
  }
}

// Every "a.b.c" leaf key of a JSON object, prefixed with `prefix`.
void leaves(const nlohmann::json& j, const std::string& prefix, std::vector<std::string>* out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it->is_object()) {
      leaves(*it, prefix + it.key() + ".", out);
    } else {
      out->push_back(prefix + it.key());
    }
  }
}

const std::vector<std::string> kSections = {"model",  "data",   "train",  "hardware", "monitors",
                                            "repeat", "limits", "worker", "cluster"};

TEST(ScenarioKeys, AreUniqueAndUnderTheTableSections) {
  std::set<std::string> seen;
  for (const scenario::KeySpec& k : scenario::scenario_keys()) {
    EXPECT_TRUE(seen.insert(k.key).second) << k.key << " twice";
    const std::string top = k.key.substr(0, k.key.find('.'));
    EXPECT_NE(std::find(kSections.begin(), kSections.end(), top), kSections.end()) << k.key;
    EXPECT_FALSE(k.help.empty()) << k.key << " has no help";
    EXPECT_EQ(k.help.find('\n'), std::string::npos) << k.key << ": help is one line";
    EXPECT_EQ(scenario::find_scenario_key(k.key), &k);
  }
  EXPECT_EQ(scenario::find_scenario_key("train.nonexistent"), nullptr);
}

// Code outside the table names a key through DBH_SCENARIO_KEY, which stops
// compiling when the member is renamed or removed; the table's rows (DBH_KEY)
// go through the same macro, so the names it yields are the table's keys.
TEST(ScenarioKeys, TheMacroNamesTheTableKeys) {
  EXPECT_STREQ(DBH_SCENARIO_KEY(train.max_steps), "train.max_steps");
  for (const char* key : {DBH_SCENARIO_KEY(model.encoder), DBH_SCENARIO_KEY(data.batch_size),
                          DBH_SCENARIO_KEY(data.val.size), DBH_SCENARIO_KEY(train.max_steps),
                          DBH_SCENARIO_KEY(hardware.memory_budget), DBH_SCENARIO_KEY(monitors.learning_window),
                          DBH_SCENARIO_KEY(repeat.in_process), DBH_SCENARIO_KEY(limits.deadline_s)}) {
    const scenario::KeySpec* k = scenario::find_scenario_key(key);
    ASSERT_NE(k, nullptr) << key;
    EXPECT_EQ(k->key, key);
  }
  EXPECT_EQ(scenario::override_text(DBH_SCENARIO_KEY(train.seed), "3"), "train.seed=3");
  EXPECT_EQ(with({scenario::override_text(DBH_SCENARIO_KEY(train.seed), "3")}).train.seed, 3);
}

TEST(ScenarioKeys, EachDefaultTextReadsBackAsTheDefault) {
  const scenario::Scenario defaults;
  for (const scenario::KeySpec& k : scenario::scenario_keys()) {
    const std::string text = scenario::default_text(k);
    SCOPED_TRACE(k.key + "=" + text);
    const scenario::Scenario s = with({k.key + "=" + text});
    EXPECT_EQ(scenario::key_json(k, s), scenario::key_json(k, defaults));
  }
}

TEST(ScenarioKeys, NothingWrittenGivesTheStructDefaults) {
  const scenario::Scenario defaults;
  const scenario::Scenario s = with({});
  for (const scenario::KeySpec& k : scenario::scenario_keys()) EXPECT_EQ(scenario::key_json(k, s), scenario::key_json(k, defaults)) << k.key;
}

TEST(ScenarioKeys, ResolvedJsonHoldsEveryKeyAndNoOther) {
  // The worker section is written for an external worker only, the cluster
  // section for a scenario that names a cluster key: the other resolved
  // scenarios (and their hashes) stay as they were.
  const auto j = nlohmann::json::parse(scenario::resolved_json(with({})));
  EXPECT_FALSE(j.contains("worker"));
  EXPECT_FALSE(j.contains("cluster"));
  for (const scenario::KeySpec& k : scenario::scenario_keys()) {
    if (k.key.rfind("worker.", 0) == 0 || k.key.rfind("cluster.", 0) == 0) continue;
    const nlohmann::json* v = at(j, k.key);
    ASSERT_NE(v, nullptr) << k.key << " is not in the resolved JSON";
    EXPECT_EQ(*v, nlohmann::json::parse(scenario::key_json(k, scenario::Scenario{}).dump())) << k.key;
  }
  const auto external = nlohmann::json::parse(scenario::resolved_json(with({"worker.command=[python, train.py]"})));
  for (const scenario::KeySpec& k : scenario::scenario_keys()) {
    if (k.key.rfind("worker.", 0) == 0) {
      EXPECT_NE(at(external, k.key), nullptr) << k.key;
    }
  }
  EXPECT_EQ(external["worker"]["command"], nlohmann::json::parse(R"(["python", "train.py"])"));
  const auto on_cluster = nlohmann::json::parse(scenario::resolved_json(with({"cluster.gpu_type=a100"})));
  for (const scenario::KeySpec& k : scenario::scenario_keys()) {
    if (k.key.rfind("cluster.", 0) == 0) {
      EXPECT_NE(at(on_cluster, k.key), nullptr) << k.key;
    }
  }
  EXPECT_EQ(on_cluster["cluster"]["gpu_type"], "a100");
  for (const auto& section : kSections) {
    if (!j.contains(section)) continue;
    std::vector<std::string> keys;
    leaves(j.at(section), section + ".", &keys);
    for (const auto& key : keys) EXPECT_NE(scenario::find_scenario_key(key), nullptr) << key << " is not in the table";
  }
}

TEST(ScenarioKeys, ResolvedJsonRoundTripsThroughTheTable) {
  // The worker reads the resolved JSON back (scenario.resolved.json).
  const scenario::Scenario s = with({"model.encoder=resnet50", "train.channels_last=true", "train.threads=4",
                           "monitors.learning_window=20", "monitors.silent=[input, learning]",
                           "data.subset=[1, 3]", "hardware.memory_budget=1GiB", "train.seed=123456789012"});
  const std::string json = scenario::resolved_json(s);
  const scenario::Scenario back = scenario::decode_scenario(parse_yaml(json, "scenario.resolved.json"), "scenario.resolved.json");
  EXPECT_EQ(scenario::resolved_json(back), json);
  EXPECT_EQ(back.model.encoder, 50);
  EXPECT_EQ(back.train.channels_last, std::optional<bool>(true));
  EXPECT_EQ(back.train.threads, 4);
  EXPECT_EQ(back.monitors.learning_window, 20);
  EXPECT_EQ(back.monitors.silent, (std::vector<std::string>{"input", "learning"}));
  EXPECT_EQ(back.data.subset, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(back.hardware.memory_budget, int64_t{1} << 30);
  EXPECT_EQ(back.train.seed, 123456789012u);
}

TEST(ScenarioKeys, AutoFormsReadAndWriteAuto) {
  const auto j = nlohmann::json::parse(scenario::resolved_json(with({})));
  EXPECT_EQ(j["train"]["channels_last"], "auto");
  EXPECT_EQ(j["train"]["threads"], "auto");
  EXPECT_EQ(j["monitors"]["learning_window"], "auto");
  const scenario::Scenario s = with({"train.channels_last=false", "train.threads=0", "monitors.learning_window=0"});
  EXPECT_EQ(s.train.channels_last, std::optional<bool>(false));
  EXPECT_EQ(s.train.threads, 0);
  EXPECT_EQ(s.monitors.learning_window, 0);
  const scenario::Scenario a = with({"train.channels_last=auto", "train.threads=auto", "monitors.learning_window=auto"});
  EXPECT_FALSE(a.train.channels_last.has_value());
  EXPECT_EQ(a.train.threads, scenario::TrainConfig::kAutoThreads);
  EXPECT_EQ(a.monitors.learning_window, scenario::MonitorConfig::kAutoLearningWindow);
}

// A value of the wrong type for each key's form.
std::vector<std::string> wrong_values(const scenario::KeySpec& k) {
  std::vector<std::string> out;
  if (k.type != scenario::KeyType::kStringMap) out.push_back("{x: 1}");  // a map is no other key's value
  switch (k.type) {
    case scenario::KeyType::kStringMap:
      out.push_back("abc");
      out.push_back("[a]");
      break;
    case scenario::KeyType::kArgs:
      out.push_back("abc");
      break;
    case scenario::KeyType::kInt:
    case scenario::KeyType::kNumber:
    case scenario::KeyType::kBytes:
    case scenario::KeyType::kAutoInt:
    case scenario::KeyType::kEncoder:
      out.push_back("abc");
      out.push_back("[1]");
      break;
    case scenario::KeyType::kIndices:
      out.push_back("abc");
      out.push_back("7");
      break;
    case scenario::KeyType::kBool:
    case scenario::KeyType::kAutoBool:
    case scenario::KeyType::kChecks:
      out.push_back("maybe");
      break;
    case scenario::KeyType::kEnum:
      out.push_back("zzz");
      out.push_back("[" + k.allowed.front() + "]");
      break;
    case scenario::KeyType::kString:
    case scenario::KeyType::kPath:
      out.push_back("[a]");
      break;
  }
  return out;
}

TEST(ScenarioKeys, AWrongTypeIsRejectedNamingTheKey) {
  for (const scenario::KeySpec& k : scenario::scenario_keys()) {
    for (const auto& value : wrong_values(k)) {
      const std::string o = k.key + "=" + value;
      const std::string m = error_of({o});
      EXPECT_EQ(m.rfind("<override> " + o + ": " + k.key + ": expected ", 0), 0u) << o << " -> " << m;
      EXPECT_NE(m.find(", got "), std::string::npos) << m;
    }
  }
}

TEST(ScenarioKeys, MessagesSayTheFormAndRange) {
  EXPECT_EQ(error_of({"data.batch_size=0"}),
            "<override> data.batch_size=0: data.batch_size: expected an integer in [1, 4096], got \"0\"");
  EXPECT_EQ(error_of({"train.seed=-1"}),
            "<override> train.seed=-1: train.seed: expected an integer in [0, ∞], got \"-1\"");
  EXPECT_EQ(error_of({"model.k=0"}), "<override> model.k=0: model.k: expected a number > 0 and <= 1e+06, got \"0\"");
  EXPECT_EQ(error_of({"model.encoder=resnet19"}),
            "<override> model.encoder=resnet19: model.encoder: expected resnet18, resnet34 or resnet50, got "
            "\"resnet19\"");
  EXPECT_EQ(error_of({"data.on_invalid=skp"}),
            "<override> data.on_invalid=skp: data.on_invalid: expected one of error, skip, clip, got \"skp\" (did "
            "you mean \"skip\"?)");
  EXPECT_EQ(error_of({"hardware.memory_budget=abc"}),
            "<override> hardware.memory_budget=abc: hardware.memory_budget: expected a size such as 512MiB or 12GB, "
            "got \"abc\"");
  EXPECT_EQ(error_of({"monitors.learning_window=3"}),
            "<override> monitors.learning_window=3: monitors.learning_window: expected auto, 0 (off) or a number of "
            "steps >= 4, got \"3\"");
  // The upper bound of train.stop_after is train.max_steps.
  EXPECT_EQ(error_of({"train.max_steps=4", "train.stop_after=5"}),
            "<override> train.stop_after=5: train.stop_after: expected an integer in [0, 4], got \"5\"");
  EXPECT_EQ(with({"train.max_steps=4", "train.stop_after=4"}).train.stop_after, 4);
}

TEST(ScenarioKeys, UnknownKeysListTheSectionsKeysOnce) {
  EXPECT_EQ(scenario::section_keys("data").back(), "val");
  EXPECT_EQ(scenario::section_keys("repeat"), (std::vector<std::string>{"in_process", "processes"}));
  for (const std::string section : {"model", "data", "data.val", "train", "hardware", "monitors", "repeat", "limits"}) {
    const auto known = scenario::section_keys(section);
    EXPECT_EQ(std::set<std::string>(known.begin(), known.end()).size(), known.size()) << section;
    const std::string m = error_of({section + ".zzz=1"});
    EXPECT_EQ(m, "<override> " + section + ".zzz=1: " + section + ".zzz: expected one of " + scenario::join(known) +
                     ", got an unknown key")
        << m;
  }
  EXPECT_NE(error_of({"train.max_step=3"}).find("(did you mean \"max_steps\"?)"), std::string::npos);
}

TEST(ScenarioKeys, ASectionMustBeAMap) {
  EXPECT_EQ(error_of({"data.val=3"}), "<override> data.val=3: data.val: expected a map, got \"3\"");
  EXPECT_EQ(error_of({"limits=[1]"}), "<override> limits=[1]: limits: expected a map, got a list");
}

TEST(ScenarioKeys, DocsScenarioKeysIsWhatTheTableGenerates) {
  const std::string doc = testing::read_text(std::string(DBH_SOURCE_DIR) + "/docs/scenario-keys.md");
  ASSERT_FALSE(doc.empty()) << "docs/scenario-keys.md was not found";
  EXPECT_EQ(doc, scenario::scenario_keys_markdown())
      << "docs/scenario-keys.md differs from the key table (harness/scenario/schema.cc); regenerate it with "
         "`build/dev/bin/dbh scenario keys > docs/scenario-keys.md`";
}

TEST(ScenarioKeys, ReferenceHasOneRowPerKey) {
  const std::string md = scenario::scenario_keys_markdown();
  for (const scenario::KeySpec& k : scenario::scenario_keys()) {
    EXPECT_NE(md.find("| `" + k.key + "` | " + scenario::key_form(k) + " | `" + scenario::default_text(k) + "` |"), std::string::npos)
        << k.key;
  }
}

}  // namespace
}  // namespace dbh::harness

namespace dbh::harness {
namespace {

// A CUDA setting on a CPU run is named as untested; on CUDA, or left at its
// default, nothing is named.
TEST(ScenarioKeys, CudaOnlySettingsOnTheCpuAreNamed) {
  scenario::Scenario s;
  s.hardware.device = "cpu";
  EXPECT_TRUE(scenario::cuda_only_settings_on_cpu(s).empty());
  s.hardware.cudnn_benchmark = !scenario::Scenario{}.hardware.cudnn_benchmark;
  s.hardware.launch_blocking = !scenario::Scenario{}.hardware.launch_blocking;
  const std::vector<std::string> want = {
      scenario::override_text(DBH_SCENARIO_KEY(hardware.cudnn_benchmark), s.hardware.cudnn_benchmark ? "true" : "false"),
      scenario::override_text(DBH_SCENARIO_KEY(hardware.launch_blocking), s.hardware.launch_blocking ? "true" : "false")};
  EXPECT_EQ(scenario::cuda_only_settings_on_cpu(s), want);
  s.hardware.device = "cuda:1";
  EXPECT_TRUE(scenario::cuda_only_settings_on_cpu(s).empty());
  // Every CUDA-only key is a hardware key, and the device itself is not one.
  for (const scenario::KeySpec& k : scenario::scenario_keys()) {
    if (k.cuda_only) {
      EXPECT_EQ(k.key.rfind("hardware.", 0), 0u) << k.key;
    }
  }
  EXPECT_FALSE(scenario::find_scenario_key(DBH_SCENARIO_KEY(hardware.device))->cuda_only);
}

// A dataset setting on synthetic data is named as not read; with real data,
// an external worker (which reads what it will), or at its default, nothing.
TEST(ScenarioKeys, DatasetSettingsOnSyntheticDataAreNamed) {
  scenario::Scenario s;
  s.data.source = scenario::DataSource::kSyntheticBoxes;
  EXPECT_TRUE(scenario::real_data_settings_unread(s).empty());
  s.data.path = "/data/icdar";
  EXPECT_EQ(scenario::real_data_settings_unread(s),
            std::vector<std::string>{scenario::override_text(DBH_SCENARIO_KEY(data.path), "/data/icdar")});
  s.data.source = scenario::DataSource::kReal;
  EXPECT_TRUE(scenario::real_data_settings_unread(s).empty());
  s.data.source = scenario::DataSource::kSyntheticRender;
  s.worker.command = {"python3", "train.py"};
  EXPECT_TRUE(scenario::real_data_settings_unread(s).empty());
  EXPECT_FALSE(scenario::find_scenario_key(DBH_SCENARIO_KEY(data.source))->real_data_only);
}

}  // namespace
}  // namespace dbh::harness

namespace dbh::harness {
namespace {

// The step training stops after: stop_after when it cuts the schedule short.
TEST(TrainConfig, LastStepIsStopAfterOrMaxSteps) {
  scenario::TrainConfig t;
  t.max_steps = 6;
  EXPECT_EQ(t.last_step(), 6);
  t.stop_after = 3;
  EXPECT_EQ(t.last_step(), 3);
  t.stop_after = 6;
  EXPECT_EQ(t.last_step(), 6);
}

// A fixed-choice key stored as an enum reads, writes and documents every
// name of its table row, and a name outside it is refused with its choices.
TEST(ScenarioKeys, AFixedChoiceKeyStoredAsAnEnumRoundTripsEveryName) {
  const scenario::KeySpec* k = scenario::find_scenario_key(DBH_SCENARIO_KEY(data.source));
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->allowed, scenario::data_source_names());
  for (const std::string& name : scenario::data_source_names()) {
    SCOPED_TRACE(name);
    const scenario::Scenario s = with({"data.source=" + name, "data.path=/data/icdar"});
    EXPECT_EQ(to_string(s.data.source), name);
    EXPECT_EQ(scenario::key_json(*k, s), name);
  }
  EXPECT_EQ(with({"data.source=synthetic_render"}).data.source, scenario::DataSource::kSyntheticRender);
  EXPECT_EQ(scenario::default_text(*k), "synthetic_boxes");
  const std::string error = error_of({"data.source=synthetic_box"});
  EXPECT_NE(error.find("data.source: expected one of real, synthetic_random, synthetic_boxes, synthetic_render"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("did you mean \"synthetic_boxes\""), std::string::npos) << error;
}

}  // namespace
}  // namespace dbh::harness
