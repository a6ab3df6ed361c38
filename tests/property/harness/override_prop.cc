// Properties of dotted overrides: a value set at a path is found there (or the
// override is rejected exactly when the path runs through a scalar or past a
// list), and valid overrides survive the worker's resolved-JSON round trip.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <charconv>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/scenario/scenario.h"
#include "harness/common/value.h"
#include "tests/support/paths.h"

namespace dbh::harness {
namespace {

// Path segments from a small alphabet so that paths share prefixes and land
// on lists (digits) as well as maps.
std::string Segment() {
  return *rc::gen::element<std::string>("a", "b", "c", "ab", "0", "1", "2", "name", "x_y");
}

// Override values written as YAML, with what they parse to.
std::string RawValue() {
  return *rc::gen::oneOf(
      rc::gen::element<std::string>("1", "-7", "0.5", "true", "off", "null", "~", "hello world", "a=b=c",
                                    "[1, 2, 3]", "[]", "[x, [y]]", "{p: 1}", "{}", "'quoted: str'",
                                    "\"two\\nlines\"", "resnet50", "512MiB"),
      rc::gen::map(rc::gen::inRange<int64_t>(-1000000, 1000000),
                   [](int64_t v) { return std::to_string(v); }));
}

bool IsIndex(const std::string& s, size_t* out) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// Whether apply_override may set `parts` in `root` (a model of the rules:
// maps and nulls are walked into or created, lists only by an index in range,
// scalars never).
bool PathIsSettable(const Value& root, const std::vector<std::string>& parts) {
  const Value* cur = &root;
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    if (cur == nullptr || cur->is_null()) return true;  // created as maps from here on
    size_t index = 0;
    if (cur->is_seq() && IsIndex(parts[i], &index)) {
      if (index >= cur->seq.size()) return false;
      if (last) return true;
      cur = &cur->seq[index];
      continue;
    }
    if (!cur->is_map()) return false;
    if (last) return true;
    cur = cur->find(parts[i]);
  }
  return true;
}

// The value at `parts`, or nullptr.
const Value* Lookup(const Value& root, const std::vector<std::string>& parts) {
  const Value* cur = &root;
  for (const auto& p : parts) {
    size_t index = 0;
    if (cur->is_seq() && IsIndex(p, &index)) {
      if (index >= cur->seq.size()) return nullptr;
      cur = &cur->seq[index];
    } else if (cur->is_map()) {
      cur = cur->find(p);
      if (cur == nullptr) return nullptr;
    } else {
      return nullptr;
    }
  }
  return cur;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ".") + p;
  return out;
}

RC_GTEST_PROP(OverrideProp, ValueIsFoundAtItsPathOrTheOverrideIsRejected, ()) {
  Value root = parse_yaml("a:\n  b: [1, {c: 2}]\n  n: ~\nname: s\nlist: [[0, 1], x]\n", "base.yaml");
  const auto count = *rc::gen::inRange(1, 8);
  for (int k = 0; k < count; ++k) {
    const auto depth = *rc::gen::inRange(1, 5);
    std::vector<std::string> parts;
    if (*rc::gen::inRange(0, 3) == 0) parts.push_back(*rc::gen::element<std::string>("a", "list"));
    while (static_cast<int>(parts.size()) < depth) parts.push_back(Segment());
    const std::string raw = RawValue();
    const std::string text = Join(parts) + "=" + raw;
    RC_LOG() << text << "\n";

    const Value before = root;
    const Value* existing = Lookup(before, parts);
    const Value parsed = parse_yaml(raw, "<override>");
    const bool settable = PathIsSettable(before, parts);
    bool threw = false;
    try {
      apply_override(root, text);
    } catch (const ScenarioError& e) {
      threw = true;
      RC_ASSERT(std::string(e.what()).find("<override> " + text) == 0);
    }
    RC_ASSERT(threw == !settable);
    if (threw) {
      RC_ASSERT(to_json(root) == to_json(before));  // a rejected override changes nothing
      continue;
    }
    const Value* found = Lookup(root, parts);
    RC_ASSERT(found != nullptr);
    if (existing != nullptr && existing->is_map() && parsed.is_map()) {
      // Maps merge: every key of the override is there, with its value.
      for (const auto& [key, v] : parsed.map) {
        RC_ASSERT(found->find(key) != nullptr);
        RC_ASSERT(to_json(*found->find(key)) == to_json(v));
      }
    } else {
      RC_ASSERT(to_json(*found) == to_json(parsed));
    }
  }
}

// One override key with generators of values the scenario accepts.
struct Knob {
  std::string key;
  rc::Gen<std::string> value;
};

std::vector<Knob> Knobs() {
  auto ints = [](int64_t lo, int64_t hi) {
    return rc::gen::map(rc::gen::inRange<int64_t>(lo, hi), [](int64_t v) { return std::to_string(v); });
  };
  auto numbers = [](int lo, int hi) {
    return rc::gen::map(rc::gen::inRange(lo, hi), [](int v) { return std::to_string(v / 1000.0); });
  };
  return {
      {"name", rc::gen::element<std::string>("a", "with space", "ünï", "123", "true")},
      {"model.encoder", rc::gen::element<std::string>("resnet18", "resnet34", "resnet50", "18", "50")},
      {"model.decoder", rc::gen::element<std::string>("fpn", "pan")},
      {"model.k", numbers(1, 100000)},
      {"data.batch_size", ints(1, 4097)},
      {"data.size", rc::gen::map(rc::gen::inRange(1, 64), [](int v) { return std::to_string(32 * v); })},
      {"data.augment", rc::gen::element<std::string>("true", "false", "yes", "off")},
      {"train.max_steps", ints(2, 1000)},  // above the scenario's fault at step 1
      {"train.lr", numbers(1, 10000)},
      {"train.momentum", numbers(0, 1001)},
      {"train.seed", ints(0, INT64_MAX)},
      {"train.optimizer", rc::gen::element<std::string>("sgd", "adam")},
      {"hardware.memory_budget", rc::gen::element<std::string>("0", "512MiB", "12GB", "1.5GiB", "4096")},
      {"monitors.mode", rc::gen::element<std::string>("cheap", "localise", "off")},
      {"faults.0.at_step", ints(0, 1)},
      {"faults.0.module", rc::gen::element<std::string>("decoder.fusion", "encoder.stem", "head.binarize")},
      {"limits.silence_s", numbers(1, 1000000)},
      {"repeat.in_process", ints(1, 1001)},
      {"expect.step", ints(0, 1)},  // below any train.max_steps
      {"expect.module", rc::gen::element<std::string>("head", "decoder.fusion")},
      {"expect.max_peak_memory", rc::gen::element<std::string>("2GiB", "100MB")},
  };
}

RC_GTEST_PROP(OverrideProp, ValidOverridesSurviveTheResolvedJsonRoundTrip, ()) {
  static const std::vector<Knob> knobs = Knobs();
  const auto n = *rc::gen::inRange<size_t>(0, 6);
  std::vector<std::string> overrides;
  for (size_t i = 0; i < n; ++i) {
    const auto& knob = knobs[*rc::gen::inRange<size_t>(0, knobs.size())];
    overrides.push_back(knob.key + "=" + *knob.value);
  }
  const scenario::Scenario s =
      scenario::load_scenario(std::string(DBH_SOURCE_DIR) + "/scenarios/nan-activation.yaml", overrides);
  const std::string json = scenario::resolved_json(s);
  const scenario::Scenario back = scenario::decode_scenario(parse_yaml(json, "scenario.resolved.json"), "");
  RC_ASSERT(scenario::resolved_json(back) == json);
  RC_ASSERT(scenario::scenario_hash(back) == scenario::scenario_hash(s));
}

}  // namespace
}  // namespace dbh::harness
