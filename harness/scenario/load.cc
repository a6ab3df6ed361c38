#include "harness/scenario/scenario.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/text.h"
#include "harness/scenario/aliases.h"
#include "harness/scenario/schema.h"
#include "harness/scenario/reader.h"

namespace dbh::harness::scenario {
namespace fs = std::filesystem;

namespace {

// Includes form a tree of at most kMaxIncludeDepth levels and
// kMaxIncludes files in all, so no scenario can make the loader read without
// bound.
constexpr size_t kMaxIncludeDepth = 8;
constexpr size_t kMaxIncludes = 64;

Value load_with_includes(const std::string& path, std::vector<std::string>& stack, std::vector<std::string>& files,
                         const Location& included_at) {
  std::error_code ec;
  const std::string canonical = fs::weakly_canonical(path, ec).string();
  if (ec) {
    throw ScenarioError(included_at.str() + ": include: expected a readable file, got " + describe_path(path) +
                        " (" + path + ")");
  }
  if (std::find(stack.begin(), stack.end(), canonical) != stack.end()) {
    throw ScenarioError(included_at.str() + ": include: expected no cycle, got " +
                        join(stack, " -> ") + " -> " + canonical);
  }
  if (stack.size() >= kMaxIncludeDepth) {
    throw ScenarioError(included_at.str() + ": include: expected includes nested at most " +
                        std::to_string(kMaxIncludeDepth) + " deep, got " + join(stack, " -> ") + " -> " + canonical);
  }
  files.push_back(canonical);
  if (files.size() > kMaxIncludes) {
    throw ScenarioError(included_at.str() + ": include: expected at most " + std::to_string(kMaxIncludes) +
                        " files in all, got more");
  }
  stack.push_back(canonical);
  Value own = load_yaml_file(path);
  if (!own.is_map() && !own.is_null()) fail(own.loc, "(top level)", "a map", own.describe());
  // The scenario itself must say something: an empty file (or only comments)
  // would run the defaults under a name nobody chose. Included files may be
  // empty (a base kept for later).
  if (stack.size() == 1 && (own.is_null() || own.map.empty())) {
    fail(Location{path, 1, 1}, "(top level)", "a scenario (a map with a name, an include or settings)",
         "an empty document");
  }
  Value merged;
  merged.kind = Value::Kind::kMap;
  merged.loc = own.loc;
  if (const Value* inc = own.find("include")) {
    std::vector<const Value*> items;
    if (inc->is_scalar()) {
      items.push_back(inc);
    } else if (inc->is_seq()) {
      for (const auto& x : inc->seq) items.push_back(&x);
    } else {
      fail(inc->loc, "include", "a file name or a list of file names", inc->describe());
    }
    for (const Value* x : items) {
      if (!x->is_scalar()) fail(x->loc, "include", "a file name", x->describe());
      if (x->scalar.empty()) fail(x->loc, "include", "a file name", "an empty string");
      const fs::path base = fs::path(x->scalar).is_absolute() ? fs::path(x->scalar)
                                                             : fs::path(path).parent_path() / x->scalar;
      std::error_code exists_ec;
      if (!fs::exists(base, exists_ec) && !exists_ec) {
        fail(x->loc, "include", "an existing file", quoted_excerpt(x->scalar) + " (" + base.string() + " not found)");
      }
      try {
        check_input_file(base.string(), "a scenario file to include");
      } catch (const ScenarioError& e) {
        throw ScenarioError(x->loc.str() + ": include: " + e.what());
      }
      merge_into(merged, load_with_includes(base.string(), stack, files, x->loc));
    }
  }
  merge_into(merged, own);
  stack.pop_back();
  return merged;
}

// Note [The user's own names]: for an external worker (worker.command set)
// an override may name a key of the user's own configuration. A key that
// worker.keys maps a dbh key to is that dbh key (`optim.step_size=50` is
// train.lr=50 when worker.keys says `train.lr: optim.step_size`); a key of
// the Lightning/Hydra alias table is translated as for any worker; any other
// key outside dbh's own sections (model, data, train, …) is the user's,
// passed through to the command unchanged in worker.overrides, and so is a
// Lightning key the alias table cannot map for dbh's own worker (the user's
// training honours it) and a key under the training's sections (model, data,
// train, hardware) that is none of dbh's and no misspelling of one (the
// user's command refuses a key it does not know). A misspelt key of dbh's
// stays dbh's, so it is still an error with its "did you mean".
bool dbh_section(const std::string& first) {
  static const std::set<std::string> kTop = [] {
    std::set<std::string> top = {"name", "description", "include", "faults", "expect", "controls"};
    for (const auto& k : scenario_keys()) top.insert(k.key.substr(0, k.key.find('.')));
    return top;
  }();
  return kTop.count(first) > 0;
}

bool external_worker(const Value& tree) {
  const Value* w = tree.find("worker");
  const Value* c = w != nullptr && w->is_map() ? w->find("command") : nullptr;
  return c != nullptr && ((c->is_seq() && !c->seq.empty()) || (c->is_scalar() && !c->scalar.empty()));
}

// Whether an external worker receives `dbh_key`: dbh passes it by default
// (under its Lightning name) or worker.keys names the user's key for it
// (worker.keys naming "" says the training has none: dbh's to hold).
bool reaches_worker(const Value& tree, const std::string& dbh_key) {
  if (dbh_key == DBH_SCENARIO_KEY(name)) return true;  // the experiment's name, dbh's as well
  const auto& passed = worker_passed_keys();
  if (std::find(passed.begin(), passed.end(), dbh_key) != passed.end()) return true;
  const Value* w = tree.find("worker");
  const Value* keys = w != nullptr && w->is_map() ? w->find("keys") : nullptr;
  return keys != nullptr && keys->is_map() && keys->find(dbh_key) != nullptr;
}

// The override `text` in dbh's words when it names a user's key that
// worker.keys maps, or passed through to worker.overrides; nullopt when it is
// dbh's (or an alias) and applies as written.
std::optional<std::string> user_key_override(Value& tree, const std::string& text) {
  if (!external_worker(tree)) return std::nullopt;
  const std::string key = override_key(text);
  if (key.empty() || key.size() == text.size()) return std::nullopt;
  const std::string value = text.substr(key.size() + 1);
  const Value* w = tree.find("worker");
  const Value* keys = w != nullptr ? w->find("keys") : nullptr;
  if (keys != nullptr && keys->is_map()) {
    for (const auto& [dbh_key, user_key] : keys->map) {
      if (user_key.is_scalar() && user_key.scalar == key && dbh_key != key) return dbh_key + "=" + value;
    }
  }
  const std::string first = key.substr(0, key.find('.'));
  // Under the training's sections (model, data, train, hardware) a key
  // that is none of dbh's, and no misspelling of one, is the user's
  // training's (LightningCLI's `model.cutoff`, `data.shuffle`; an experiment
  // file's `train.data_dir`): its command refuses a key it does not know.
  static const std::vector<std::string> kKnown = [] {
    std::vector<std::string> keys;
    for (const auto& k : scenario_keys()) keys.push_back(k.key);
    return keys;
  }();
  const bool training_section = first == "model" || first == "data" || first == "train" || first == "hardware";
  const bool users_key = training_section && key.find('.') != std::string::npos && find_scenario_key(key) == nullptr &&
                         key.find_first_of("[]") == std::string::npos && did_you_mean(key, kKnown).empty();
  if ((dbh_section(first) && !users_key) || first.rfind('+', 0) == 0 || first.rfind('-', 0) == 0) {
    return std::nullopt;
  }
  // A Lightning key dbh cannot honour in its own worker is the user's
  // training's to honour (`trainer.val_check_interval=2`), and so is one it
  // maps to a dbh key this worker never receives (`trainer.gradient_clip_val`
  // with no worker.keys entry for train.grad_clip): the user wrote a key of
  // their command, which must reach it.
  const auto alias = translate_alias(key, value);
  if (alias && alias->kind != AliasTranslation::Kind::kUnmapped &&
      !(alias->kind == AliasTranslation::Kind::kMapped && !reaches_worker(tree, alias->key))) {
    return std::nullopt;  // the alias table's
  }
  Value* worker = tree.find("worker");
  Value* overrides = worker->find("overrides");
  if (overrides == nullptr || !overrides->is_map()) {
    Value m;
    m.kind = Value::Kind::kMap;
    worker->set("overrides", m);
    overrides = worker->find("overrides");
  }
  Value v;
  v.kind = Value::Kind::kScalar;
  v.scalar = value;
  v.loc = v.key_loc = Location{"<override> " + one_line(text), 0, 0};
  overrides->set(key, v);
  return std::string();  // applied
}

// Overrides may use the Lightning/Hydra keys of the user's training command
// (Note [Lightning aliases] in aliases.h), translated here for the command
// line and for controls alike, and the keys of the user's own configuration
// (Note [The user's own names]). The value keeps the user's override as its
// location, so a later error names what the user wrote.
void apply_user_override(Value& tree, const std::string& text) {
  // Includes are merged before any override: one given as an override
  // would be silently ignored.
  const std::string key_text = override_key(text);
  if (key_text == "include" || key_text.rfind("include.", 0) == 0) {
    throw ScenarioError("<override> " + one_line(text) +
                        ": include: expected includes in a scenario file (merged before any override), got an "
                        "override");
  }
  if (const auto user = user_key_override(tree, text)) {
    if (user->empty()) return;  // the user's own key, passed through
    apply_user_override(tree, *user);
    return;
  }
  const std::optional<std::string> translated = translate_override(text);
  if (!translated) return;  // dbh already behaves so (trainer.devices=1)
  apply_override(tree, *translated);
  if (*translated == text) return;
  Value* v = &tree;
  std::stringstream key(override_key(*translated));
  for (std::string part; std::getline(key, part, '.');) {
    v = v->is_map() ? v->find(part) : nullptr;
    if (v == nullptr) return;
  }
  v->loc.file = "<override> " + text;
  v->key_loc.file = v->loc.file;
}

}  // namespace

bool override_sets(const std::string& text, const std::string& key) {
  Value tree;
  tree.kind = Value::Kind::kMap;
  try {
    apply_user_override(tree, text);
  } catch (const ScenarioError&) {
    return false;  // refused where the scenario loads, with its own message
  }
  const Value* v = &tree;
  std::stringstream parts(key);
  for (std::string part; std::getline(parts, part, '.');) {
    v = v->is_map() ? v->find(part) : nullptr;
    if (v == nullptr) return false;
  }
  return true;
}

namespace {

// The merged tree of `path` and its includes; `files` gets every file read.
Value load_tree(const std::string& path, std::vector<std::string>& files) {
  check_input_file(path, "a scenario file");
  std::vector<std::string> stack;
  return load_with_includes(path, stack, files, Location{path, 0, 0});
}

}  // namespace

namespace {

bool same_value(const Value& a, const Value& b) {
  if (a.kind != b.kind || a.scalar != b.scalar || a.map.size() != b.map.size() || a.seq.size() != b.seq.size()) {
    return false;
  }
  for (size_t i = 0; i < a.map.size(); ++i) {
    if (a.map[i].first != b.map[i].first || !same_value(a.map[i].second, b.map[i].second)) return false;
  }
  for (size_t i = 0; i < a.seq.size(); ++i) {
    if (!same_value(a.seq[i], b.seq[i])) return false;
  }
  return true;
}

// What `after` holds that `before` does not: maps key by key, anything else
// whole (a merge replaces a list or a scalar whole). Overrides only set keys,
// so nothing of `before` is missing from `after`.
Value changed_part(const Value& before, const Value& after) {
  Value layer;
  layer.kind = Value::Kind::kMap;
  for (const auto& [key, value] : after.map) {
    const Value* old = before.find(key);
    if (old == nullptr) {
      layer.set(key, value);
    } else if (old->is_map() && value.is_map()) {
      Value inner = changed_part(*old, value);
      if (!inner.map.empty()) layer.set(key, inner);
    } else if (!same_value(*old, value)) {
      layer.set(key, value);
    }
  }
  return layer;
}

}  // namespace

Value override_layer(const std::string& path, const std::vector<std::string>& overrides) {
  std::vector<std::string> files;
  const Value before = load_tree(path, files);
  Value after = before;
  for (const auto& o : overrides) apply_user_override(after, o);
  return changed_part(before, after);
}

std::vector<std::string> scenario_files(const std::string& path) {
  std::vector<std::string> files;
  (void)load_tree(path, files);
  return files;
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides,
                       const InputChecks& checks) {
  std::vector<std::string> files;
  const Value tree_from_files = load_tree(path, files);
  Value tree = tree_from_files;
  for (const auto& o : overrides) apply_user_override(tree, o);
  auto read = [&path](const Value& t, const InputChecks& c) {
    Scenario s = decode_scenario(t, path);
    check_scenario_inputs(s, t, c);
    return s;
  };
  Scenario s;
  try {
    s = read(tree, checks);
  } catch (const ScenarioError& e) {
    // A key of the file that only the overrides made wrong (faults.0.name=…
    // leaves the file's fault keys to another fault): say which overrides.
    bool file_alone_loads = false;
    if (!overrides.empty() && std::string(e.what()).rfind("<override>", 0) != 0) {
      try {
        (void)read(tree_from_files, checks);
        file_alone_loads = true;
      } catch (const ScenarioError&) {
      }
    }
    if (!file_alone_loads) throw;
    std::string given;
    for (const auto& o : overrides) given += (given.empty() ? "" : " ") + one_line(o);
    throw ScenarioError(std::string(e.what()) + " (the file loads without the overrides " + given + ")");
  }
  s.overrides = overrides;
  s.files = files;
  // Every control must be a valid scenario too, before anything runs.
  for (size_t i = 0; i < s.controls.size(); ++i) {
    Value control = tree;
    try {
      for (const auto& o : s.controls[i]) apply_user_override(control, o);
      (void)read(control, {});
    } catch (const ScenarioError& e) {
      const Value* controls = tree.find("controls");
      const Location at = controls != nullptr && i < controls->seq.size() ? controls->seq[i].loc
                                                                          : Location{path, 0, 0};
      throw ScenarioError(at.str() + ": controls[" + std::to_string(i) + "]: " + e.what());
    }
  }
  return s;
}

}  // namespace dbh::harness::scenario
