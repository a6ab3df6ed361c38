#include "harness/scenario/config_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/text.h"
#include "harness/common/value.h"

namespace dbh::harness::scenario {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxConfigBytes = 16u << 20;

// Every scalar of the tree under its dotted key (list items by index).
void flatten(const Value& v, const std::string& prefix, std::map<std::string, const Value*>& out) {
  if (v.is_map()) {
    for (const auto& [k, child] : v.map) flatten(child, prefix.empty() ? k : prefix + "." + k, out);
  } else if (v.is_seq()) {
    for (size_t i = 0; i < v.seq.size(); ++i) flatten(v.seq[i], prefix + "." + std::to_string(i), out);
  } else if (!prefix.empty()) {
    out[prefix] = &v;
  }
}

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  (void)std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno != ERANGE;
}

bool is_bool(const std::string& s) { return s == "true" || s == "false" || s == "True" || s == "False"; }

// The bytes of the scalar that starts at `at`: [at, end). nullopt when the
// text there is not one dbh can replace whole (a tag, an anchor, an alias,
// a block scalar, a plain scalar over several lines).
std::optional<size_t> scalar_end(const std::string& text, size_t& at, const Value& v) {
  // An anchor before the value (`&side 16`) stays; the value after it is replaced.
  if (at < text.size() && text[at] == '&') {
    const size_t space = text.find_first_of(" \t", at);
    const size_t value = space == std::string::npos ? std::string::npos : text.find_first_not_of(" \t", space);
    if (value == std::string::npos || text[value] == '\n' || text[value] == '\r') return std::nullopt;
    at = value;
  }
  if (at >= text.size()) return std::nullopt;
  const char c = text[at];
  if (c == '"') {
    for (size_t i = at + 1; i < text.size(); ++i) {
      if (text[i] == '\\') {
        ++i;
      } else if (text[i] == '"') {
        return i + 1;
      }
    }
    return std::nullopt;
  }
  if (c == '\'') {
    for (size_t i = at + 1; i < text.size(); ++i) {
      if (text[i] == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;
      } else if (text[i] == '\'') {
        return i + 1;
      }
    }
    return std::nullopt;
  }
  if (c == '!' || c == '&' || c == '*' || c == '|' || c == '>' || c == '{' || c == '[') return std::nullopt;
  // A plain scalar ends at the line's end or a comment; in a flow
  // collection (JSON) also at ',', ']' or '}'. The cut that reads back as
  // the value is the one.
  const auto trimmed_end = [&](size_t end) {
    while (end > at && (text[end - 1] == ' ' || text[end - 1] == '\t')) --end;
    return end;
  };
  size_t line_end = text.find_first_of("\r\n", at);
  if (line_end == std::string::npos) line_end = text.size();
  size_t comment = text.find(" #", at);
  const size_t block = trimmed_end(std::min(line_end, comment == std::string::npos ? line_end : comment));
  if (text.compare(at, block - at, v.scalar) == 0) return block;
  const size_t flow_at = text.find_first_of(",]}", at);
  if (flow_at != std::string::npos && flow_at < line_end) {
    const size_t flow = trimmed_end(flow_at);
    if (text.compare(at, flow - at, v.scalar) == 0) return flow;
  }
  return std::nullopt;
}

size_t offset_of(const std::vector<size_t>& line_starts, const Location& loc) {
  if (loc.line < 1 || static_cast<size_t>(loc.line) > line_starts.size()) return std::string::npos;
  return line_starts[static_cast<size_t>(loc.line) - 1] + static_cast<size_t>(std::max(loc.column, 1) - 1);
}

struct Replacement {
  size_t at, end;
  std::string text;
};

}  // namespace

bool config_file_name(const std::string& word) {
  std::string ext = fs::path(word).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".yaml" || ext == ".yml" || ext == ".json";
}

std::string edit_config_text(const std::string& text, const std::string& file, const std::vector<FileEdit>& edits,
                             const std::function<std::optional<std::string>(const std::string&)>& absolute_path) {
  Value root;
  try {
    root = parse_yaml(text, file);
  } catch (const ScenarioError& e) {
    throw UsageError(std::string(e.what()) + " (dbh sets keys in a copy of a YAML or JSON file)");
  }
  std::map<std::string, const Value*> scalars;
  flatten(root, "", scalars);
  std::vector<size_t> line_starts = {0};
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') line_starts.push_back(i + 1);
  }
  std::vector<Replacement> replacements;
  std::map<std::string, std::string> expected;  // key -> its scalar in the copy
  std::map<std::string, std::string> anchored;  // an edited value -> its new value (an alias of it follows)
  for (const auto& e : edits) {
    const auto it = scalars.find(e.key);
    if (it == scalars.end()) {
      throw UsageError(file + ": " + e.key + ": expected a key of this file holding one value, got " +
                       (root.is_map() ? "none (dbh sets a key the file holds; `worker.written_as` names it)"
                                      : "a file that is not a map of keys"));
    }
    const Value& v = *it->second;
    size_t at = offset_of(line_starts, v.loc);
    const auto end = at == std::string::npos ? std::nullopt : scalar_end(text, at, v);
    if (!end) {
      throw UsageError(v.loc.str() + ": " + e.key + ": expected a plain or quoted value dbh can replace, got " +
                       quoted_excerpt(text.substr(at == std::string::npos ? 0 : at, 40)) +
                       " (a tag, an anchor, an alias or a value over several lines)");
    }
    expected[e.key] = e.value;
    if (v.scalar == e.value) continue;  // already so: nothing to replace
    const bool plain = text[at] != '"' && text[at] != '\'';
    const bool raw = plain && (is_number(e.value) || is_bool(e.value));
    replacements.push_back({at, *end, raw ? e.value : nlohmann::json(e.value).dump()});
    anchored[v.scalar] = e.value;
  }
  for (const auto& [key, v] : scalars) {
    if (expected.count(key) > 0 || v->scalar.empty()) continue;
    const auto path = absolute_path(v->scalar);
    if (!path) continue;
    size_t at = offset_of(line_starts, v->loc);
    const auto end = at == std::string::npos ? std::nullopt : scalar_end(text, at, *v);
    if (!end) continue;  // a tagged value stays as it is
    replacements.push_back({at, *end, nlohmann::json(*path).dump()});
    expected[key] = *path;
  }
  std::sort(replacements.begin(), replacements.end(),
            [](const Replacement& a, const Replacement& b) { return a.at > b.at; });
  std::string out = text;
  for (const auto& r : replacements) out.replace(r.at, r.end - r.at, r.text);
  // Read back: every key holds what it held, but the ones set.
  Value copy;
  try {
    copy = parse_yaml(out, file);
  } catch (const ScenarioError& e) {
    throw UsageError(file + ": expected a file dbh can set keys in, got one whose edited copy does not read back (" +
                     std::string(e.what()) + ")");
  }
  std::map<std::string, const Value*> after;
  flatten(copy, "", after);
  bool same = after.size() == scalars.size();
  for (const auto& [key, v] : scalars) {
    const auto it = after.find(key);
    const auto want = expected.find(key);
    if (it == after.end()) {
      same = false;
    } else if (want != expected.end()) {
      same = same && it->second->scalar == want->second;
    } else if (it->second->scalar != v->scalar) {
      // An alias of an anchored value dbh set follows it (`again: *e`).
      const auto a = anchored.find(v->scalar);
      same = same && a != anchored.end() && a->second == it->second->scalar;
    }
  }
  if (!same) {
    throw UsageError(file + ": expected a file dbh can set keys in, got one whose edited copy reads back otherwise "
                     "(set the keys with worker.overrides or the command's own options)");
  }
  return out;
}

std::string write_config_copy(const std::string& word, const std::string& cwd, const std::vector<FileEdit>& edits,
                              const std::string& dir) {
  const fs::path source = fs::path(word).is_absolute() ? fs::path(word) : fs::path(cwd) / word;
  const auto text = read_regular_file(source.string(), kMaxConfigBytes);
  if (!text) {
    throw UsageError(source.string() + ": expected a YAML or JSON file of at most 16 MiB for dbh to copy with its "
                     "keys set, got " + file_state(source.string()));
  }
  const fs::path folder = source.parent_path();
  std::error_code ec;
  const bool same_folder = fs::equivalent(folder, cwd, ec);
  const auto absolute_path = [&](const std::string& s) -> std::optional<std::string> {
    if (same_folder || s.size() > 4096 || fs::path(s).is_absolute() || is_number(s) || is_bool(s) ||
        s.find('\n') != std::string::npos) {
      return std::nullopt;
    }
    std::error_code e1, e2;
    if (!fs::exists(folder / s, e1) || fs::exists(fs::path(cwd) / s, e2)) return std::nullopt;
    return fs::absolute(folder / s).lexically_normal().string();
  };
  const std::string copy = edit_config_text(*text, source.string(), edits, absolute_path);
  const fs::path out_dir = fs::path(dir) / "config-copy";
  make_directories_no_follow(out_dir.string());
  const fs::path out = out_dir / source.filename();
  write_file_atomically(out.string(), copy);
  return out.string();
}

std::optional<std::vector<ConfigEntry>> read_config_file(const std::string& path, size_t max_keys) {
  if (!config_file_name(path)) return std::nullopt;
  const auto text = read_regular_file(path, kMaxConfigBytes);
  if (!text) return std::nullopt;
  Value root;
  try {
    root = parse_yaml(*text, path);
  } catch (const ScenarioError&) {
    return std::nullopt;
  }
  if (!root.is_map()) return std::nullopt;
  std::map<std::string, const Value*> scalars;
  flatten(root, "", scalars);
  std::vector<ConfigEntry> out;
  for (const auto& [key, v] : scalars) {
    if (out.size() >= max_keys) break;
    const std::string& s = v->scalar;
    nlohmann::json j = s;
    if (is_bool(s)) {
      j = s == "true" || s == "True";
    } else if (s == "null" || s == "~" || s.empty()) {
      j = nullptr;
    } else if (is_number(s) && s.find_first_of(".eE") == std::string::npos) {
      j = std::strtoll(s.c_str(), nullptr, 10);
    } else if (is_number(s)) {
      j = std::strtod(s.c_str(), nullptr);
    }
    out.emplace_back(key, j);
  }
  return out;
}

}  // namespace dbh::harness::scenario
