#pragma once

// Reading a scenario's merged YAML tree, for scenario/'s own files only
// (decode.cc turns the tree into a Scenario, load.cc merges files and
// overrides into the tree): a map's keys with their types, ranges and
// unknown-key errors, and where in the files a key was written.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/common/value.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::scenario {

// A section written with nothing after it ("train:") would replace what the
// included files set with the defaults: refused like an empty key.
inline constexpr const char* kSectionForm = "a map of its keys";

// Reads the keys of one map that the key table (schema.h) does not hold: the
// top level, a fault, the expectation. Checks types, ranges and unknown keys.
class MapReader {
 public:
  // `nulls_unset`: every key of this map may be written empty to unset it
  // (the expectation's, which an override such as expect.step=null drops).
  MapReader(const Value* v, std::string path, Location fallback, bool nulls_unset = false)
      : v_(v), path_(std::move(path)), fallback_(std::move(fallback)), nulls_unset_(nulls_unset) {
    if (v_ != nullptr && !v_->is_map() && !v_->is_null()) {
      fail(v_->loc, path_, "a map", v_->describe());
    }
  }

  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }

  // The value written for `k`, or null when none is. A key written with an
  // empty value ("at_step:") is refused unless null says something for it
  // (`unset`: an optional expectation left to its default).
  const Value* get(const std::string& k, bool null_means_unset = false, const std::string& expected = "a value") {
    known_.push_back(k);
    if (v_ == nullptr || !v_->is_map()) return nullptr;
    const Value* x = v_->find(k);
    if (x != nullptr && x->is_null() && !null_means_unset && !nulls_unset_) fail_empty(*x, key(k), expected);
    return (x == nullptr || x->is_null()) ? nullptr : x;
  }

  const Value& scalar(const std::string& k, const Value* x, const char* expected) {
    if (!x->is_scalar()) fail(x->loc, key(k), expected, x->describe());
    return *x;
  }

  int64_t integer(const std::string& k, int64_t def, int64_t lo, int64_t hi) {
    const std::string expected = hi == INT64_MAX ? "an integer >= " + std::to_string(lo)
                                                 : "an integer in [" + std::to_string(lo) + ", " +
                                                       std::to_string(hi) + "]";
    const Value* x = get(k, false, expected);
    if (x == nullptr) return def;
    int64_t v = 0;
    if (!parse_int(scalar(k, x, expected.c_str()).scalar, &v) || v < lo || v > hi) {
      fail(x->loc, key(k), expected, x->describe());
    }
    return v;
  }

  double number(const std::string& k, double def, double lo, double hi, bool lo_open = false) {
    std::ostringstream e;
    e << "a number " << (lo_open ? "> " : ">= ") << lo;
    if (hi < 1e300) e << " and <= " << hi;
    const Value* x = get(k, false, e.str());
    if (x == nullptr) return def;
    double v = 0;
    if (!parse_double(scalar(k, x, e.str().c_str()).scalar, &v) || v < lo || (lo_open && v == lo) ||
        v > hi) {
      fail(x->loc, key(k), e.str(), x->describe());
    }
    return v;
  }

  bool boolean(const std::string& k, bool def) {
    const Value* x = get(k, false, "true or false");
    if (x == nullptr) return def;
    bool v = false;
    if (!parse_bool(scalar(k, x, "true or false").scalar, &v)) {
      fail(x->loc, key(k), "true or false", x->describe());
    }
    return v;
  }

  std::optional<bool> opt_boolean(const std::string& k) {
    if (get(k, true) == nullptr) return std::nullopt;
    known_.pop_back();
    return boolean(k, false);
  }

  std::string string(const std::string& k, const std::string& def,
                     const std::vector<std::string>& allowed = {}) {
    const std::string expected =
        allowed.empty() ? std::string("a string") : "one of " + join(allowed);
    const Value* x = get(k, false, expected);
    if (x == nullptr) return def;
    const std::string& s = scalar(k, x, expected.c_str()).scalar;
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
      fail(x->loc, key(k), expected, x->describe() + did_you_mean(s, allowed));
    }
    return s;
  }

  std::optional<std::string> opt_string(const std::string& k,
                                        const std::vector<std::string>& allowed = {}) {
    if (get(k, true) == nullptr) return std::nullopt;
    known_.pop_back();
    return string(k, "", allowed);
  }

  // Unknown keys are errors, with a suggestion among the known ones.
  void finish() {
    if (v_ == nullptr || !v_->is_map()) return;
    // Each known key once, in the order first read (a key read twice, as
    // `name` is, would be listed twice).
    std::vector<std::string> known;
    for (const auto& k : known_) {
      if (std::find(known.begin(), known.end(), k) == known.end()) known.push_back(k);
    }
    for (const auto& [k, x] : v_->map) {
      if (std::find(known.begin(), known.end(), k) == known.end()) {
        throw ScenarioError(x.key_loc.str() + ": " + key(k) + ": expected one of " +
                            join(known) + ", got an unknown key" + did_you_mean(k, known));
      }
    }
  }

  const Location& loc() const { return v_ != nullptr ? v_->loc : fallback_; }

 private:
  const Value* v_;
  std::string path_;
  Location fallback_;
  bool nulls_unset_ = false;
  std::vector<std::string> known_;
};

inline const Value* written(const Value& tree, const std::string& key) {
  const Value* v = &tree;
  std::stringstream parts(key);
  for (std::string part; std::getline(parts, part, '.');) {
    v = v->is_map() ? v->find(part) : nullptr;
    if (v == nullptr) return nullptr;
  }
  return v->is_null() ? nullptr : v;
}

// Where `key` is written, else where its nearest written parent is (the
// scenario's top when none is).
inline Location where(const Value& tree, std::string key) {
  for (;;) {
    if (const Value* v = written(tree, key)) return v->loc;
    const size_t dot = key.rfind('.');
    if (dot == std::string::npos) return tree.loc;
    key.resize(dot);
  }
}

// The checks decode_scenario and check_scenario_inputs share (Note [Decode,
// then check]), in decode.cc.

// Every data.subset index lies below `samples`, the samples training reads.
void check_subset_indices(const Value& tree, const Scenario& s, int64_t samples);

// The placement rules of every fault of `s` (Note [Fault registry]):
// `samples` says how many samples training reads where known, and
// `reads_inputs` whether a rule may read the dataset.
void check_fault_placements(const Value& tree, const Scenario& s,
                            const std::function<std::optional<int64_t>()>& samples, bool reads_inputs);

}  // namespace dbh::harness::scenario
