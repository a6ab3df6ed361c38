#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dbh::harness {

/// Where a configuration value came from.
struct Location {
  std::string file;  // scenario file, or "<override>" for command-line values
  int line = 0;      // 1-based; 0 when unknown
  int column = 0;    // 1-based
  std::string str() const;
};

/// A YAML value with its location: the scenario loader's tree. Maps keep
/// their key order.
struct Value {
  enum class Kind { kNull, kScalar, kMap, kSeq };
  Kind kind = Kind::kNull;
  std::string scalar;
  std::vector<std::pair<std::string, Value>> map;
  std::vector<Value> seq;
  Location loc;
  /// Location of the key naming this value in its parent map, if any.
  Location key_loc;

  bool is_null() const { return kind == Kind::kNull; }
  bool is_scalar() const { return kind == Kind::kScalar; }
  bool is_map() const { return kind == Kind::kMap; }
  bool is_seq() const { return kind == Kind::kSeq; }
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  /// Sets map[key] (appending when new).
  void set(const std::string& key, Value v);
  /// "a map", "a list", "null", or the scalar quoted.
  std::string describe() const;
};

/// Parses YAML text (one document). Throws ScenarioError with file:line:col
/// on a syntax error.
Value parse_yaml(const std::string& text, const std::string& file);
Value load_yaml_file(const std::string& path);

/// Deep merge: maps merge key by key (overlay wins), anything else is
/// replaced by the overlay.
void merge_into(Value& base, const Value& overlay);

/// Applies a Hydra-style dotted override "a.b.c=value" (value parsed as YAML;
/// list elements addressed by index, "faults.0.at_step=3"). Throws
/// ScenarioError naming the override on bad syntax.
void apply_override(Value& root, const std::string& override_text);

/// Whether a command-line word is a key.path=value override (it holds '=');
/// every other word names a file or a command's argument.
bool is_override(const std::string& word);

/// The key of an override: "train.lr" of "train.lr=0.1" (the whole text when
/// it holds no '=').
std::string override_key(const std::string& override_text);

/// Serialises the tree as JSON text (scalars that look like numbers or
/// booleans are emitted as such).
std::string to_json(const Value& v, int indent = 2);

}  // namespace dbh::harness
