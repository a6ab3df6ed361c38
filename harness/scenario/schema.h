#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/scenario/scenario.h"
#include "harness/common/value.h"

namespace dbh::harness::scenario {

/// The scenario key of the Scenario member `path`, as a `const char*`:
/// DBH_SCENARIO_KEY(train.max_steps) is "train.max_steps". A key's name is
/// its member path (the table's rows in schema.cc are spelled the same way),
/// so code that names a key through this macro — an override it builds, a
/// table of flags or aliases, a message — stops compiling when the key is
/// renamed or removed, where a string would name a key the loader rejects at
/// run time, or a message would name a key that no longer exists.
#define DBH_SCENARIO_KEY(path) (static_cast<void>(sizeof(std::declval<::dbh::harness::scenario::Scenario&>().path)), #path)

/// How a scenario key is written, and so how it is checked.
enum class KeyType {
  kInt,        // an integer in [lo, hi] (hi: the value of hi_key when named)
  kNumber,     // a number >= min (> min when min_open) and <= max
  kBool,       // true or false (also True, yes, on, …)
  kString,     // any string
  kEnum,       // one of `allowed`, an enum member: the name's index in `allowed`
  kBytes,      // a size such as 512MiB, 12GB or 4096
  kPath,       // a file or folder, relative to the file that wrote it
  kAutoBool,   // auto (nullopt), true or false
  kAutoInt,    // auto (stored as auto_value), 0 or an integer in [lo, hi]
  kEncoder,    // one of `allowed` ("resnet18", or the bare depth 18), stored as the depth
  kChecks,     // true (all of `allowed`), false (none) or a list of `allowed`
  kIndices,    // a list of non-negative integers
  kArgs,       // a list of strings (an argv)
  kStringMap,  // a map of strings to strings
};

/// The Scenario member a key sets, as a function returning its address.
template <typename T>
using KeyField = T* (*)(Scenario&);

/// One scenario key: its dotted name, how it is written, what it means and
/// the member of Scenario it sets. Its default is that member's initializer
/// (scenario.h); a key a scenario does not write keeps it.
struct KeySpec {
  std::string key;  // "train.max_steps"
  KeyType type = KeyType::kString;
  std::variant<KeyField<int64_t>, KeyField<uint64_t>, KeyField<double>, KeyField<bool>, KeyField<std::string>,
               KeyField<std::optional<bool>>, KeyField<std::vector<int64_t>>, KeyField<std::vector<std::string>>,
               KeyField<std::map<std::string, std::string>>,
               // kEnum: one alternative per enum (Note [Fixed choices are enums])
               KeyField<DataSource>, KeyField<TrainMode>, KeyField<MonitorMode>, KeyField<model::DecoderKind>,
               KeyField<model::OptimizerKind>, KeyField<model::Precision>, KeyField<model::ResizeSide>,
               KeyField<model::OnInvalid>, KeyField<CommandSyntax>, KeyField<NumericsVariant>>
      field;
  std::string help;  // one line of Markdown, for docs/scenario-keys.md
  int64_t lo = 0;    // kInt, kAutoInt
  int64_t hi = 0;
  std::string hi_key;      // kInt: the upper bound is this (earlier) key's value
  int64_t auto_value = 0;  // kAutoInt: the member's value for `auto`
  double min = 0;          // kNumber
  double max = 0;
  bool min_open = false;
  std::vector<std::string> allowed;  // kEnum, kEncoder, kChecks
  std::string expected;              // kAutoInt: its form, for messages and the reference
  bool cuda_only = false;            // configures CUDA or cuDNN: no effect on a CPU run
  bool real_data_only = false;       // read only when data.source is real (a dataset)
};

/// The override "key=value" that sets `key` (one DBH_SCENARIO_KEY names) to
/// `value`, as written on a command line and parsed by apply_override.
std::string override_text(const std::string& key, const std::string& value);

/// Every key under model, data (with data.val), train, hardware, monitors,
/// repeat, limits and worker, in the order of the resolved JSON.
const std::vector<KeySpec>& scenario_keys();
/// The key named `key` ("data.val.size"), or null.
const KeySpec* find_scenario_key(const std::string& key);

/// The keys a map at `section` ("data", "data.val") may hold, in table order:
/// its own keys and the names of its subsections ("val").
std::vector<std::string> section_keys(const std::string& section);

/// Reads the table's keys of `section` ("model", "data", …) from `v` into
/// `s`: each written key's type and range (a key not written, or written as
/// null, keeps its default), then the subsections, then unknown keys (with
/// "did you mean"). `v` null: nothing is written. Throws ScenarioError
/// "file:line:col: key: expected …, got …".
void read_section(const Value* v, const std::string& section, Scenario& s);

/// The value of `k` in `s` as the resolved JSON writes it: "auto" for the
/// auto forms, the encoder as "resnet18", a byte size as a string of bytes.
nlohmann::ordered_json key_json(const KeySpec& k, const Scenario& s);
/// The keys of `section` in `s` as a JSON object (subsections nested), in
/// table order.
nlohmann::ordered_json section_json(const std::string& section, const Scenario& s);

/// The default of `k` (its value in a default-constructed Scenario) as a
/// scenario file writes it: `auto`, `resnet18`, `0.007`, `""`, `[a, b]`.
std::string default_text(const KeySpec& k);
/// How `k` is written, as a message's "expected …" says it: "an integer in
/// [1, 4096]", "one of fpn, pan", "auto, true or false".
std::string key_form(const KeySpec& k);

/// The CUDA-only keys (KeySpec::cuda_only) that `s` sets away from their
/// default while it runs on the CPU, each as its override ("key=value"): the
/// settings such a run cannot test. Empty on a CUDA device.
std::vector<std::string> cuda_only_settings_on_cpu(const Scenario& s);

/// The keys read only from a dataset (KeySpec::real_data_only) that `s` sets
/// away from their default while dbh's worker trains on another source
/// (`data.source` synthetic, as a control that swaps the data does), each as
/// its override: settings such a run does not read. Empty for `real` data and
/// for an external worker, which reads what it will.
std::vector<std::string> real_data_settings_unread(const Scenario& s);

/// The reference of every key of the table as Markdown: one table per
/// section with key, form, default and meaning (`dbh scenario keys`,
/// docs/scenario-keys.md).
std::string scenario_keys_markdown();

// Scalars as scenario files write them, and the loader's error form; shared
// by the table and the keys it does not hold (faults, expect, …).

/// A whole-string decimal integer.
bool parse_int(const std::string& text, int64_t* out);
/// A whole-string finite number.
bool parse_double(const std::string& text, double* out);
/// true/True/TRUE/yes/on or false/False/FALSE/no/off.
bool parse_bool(const std::string& text, bool* out);
/// " (did you mean \"K\"?)" for the entry K of `known` nearest to `word`
/// (edit distance below 3), else "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& known);
/// `words` joined by `sep`.
std::string join(const std::vector<std::string>& words, const char* sep = ", ");
/// Throws ScenarioError "LOC: KEY: expected EXPECTED, got GOT".
[[noreturn]] void fail(const Location& loc, const std::string& key, const std::string& expected,
                       const std::string& got);
/// Throws for `x`, a key or section written with nothing after it
/// ("max_steps:", "train:", `key=null`): YAML reads null, which would
/// silently stand for the default and undo what an include set. Names the
/// key where it is written.
[[noreturn]] void fail_empty(const Value& x, const std::string& key, const std::string& expected);

}  // namespace dbh::harness::scenario
