#include "harness/scenario/from_command.h"

#include <algorithm>
#include <filesystem>
#include <cctype>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/scenario/aliases.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::scenario {
namespace {

constexpr const char* kWhere = "scenario from-command: ";

// One dbh key the command sets, with the word that set it.
struct Setting {
  std::string key;
  std::string value;   // a YAML flow scalar
  std::string source;  // the command's word ("" = a default the converter chose)
  std::string note;
};

// The top-level sections in the order a scenario lists them.
int section_rank(const std::string& key) {
  static const std::vector<std::string> kSections = {"name", "description", "include", "model",
                                                     "data", "train",       "hardware", "worker"};
  const std::string root = key.substr(0, key.find('.'));
  const auto it = std::find(kSections.begin(), kSections.end(), root);
  return static_cast<int>(it - kSections.begin());
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream in(key);
  for (std::string p; std::getline(in, p, '.');)
    parts.push_back(p);
  return parts;
}

std::string parent_of(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

bool is_env_assignment(const std::string& w) {
  const size_t eq = w.find('=');
  if (eq == 0 || eq == std::string::npos || std::isdigit(static_cast<unsigned char>(w[0]))) return false;
  return std::all_of(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(eq), [](char c) {
    return std::isupper(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool looks_like_override(const std::string& w) {
  return !w.empty() && w[0] != '-' && (w.find('=') != std::string::npos || w[0] == '~' || w[0] == '+');
}

std::string unquoted_lower(std::string v) {
  if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) v = v.substr(1, v.size() - 2);
  for (char& c : v)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return v;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string join_words(const std::vector<std::string>& words, const std::string& separator) {
  std::string out;
  for (const auto& w : words)
    out += (out.empty() ? "" : separator) + w;
  return out;
}

std::string join_quoted(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words)
    out += (out.empty() ? "" : " ") + shell_quote(w);
  return out;
}

// The script flags that give the training image size (argparse style).
bool is_image_size_flag(const std::string& flag) {
  std::string f = flag;
  std::replace(f.begin(), f.end(), '-', '_');
  return f == "__target_size" || f == "__image_size" || f == "__img_size" || f == "__imgsz" || f == "__input_size";
}

// Whether `w`, after the value words `so_far` of an image-size flag, carries
// that value on: the list is still open or ends with a comma, `w` closes or
// continues it, or all are plain numbers (argparse's nargs=2).
bool continues_size(const std::vector<std::string>& so_far, const std::string& w) {
  if (w.empty() || w.find('=') != std::string::npos) return false;
  const std::string text = join_words(so_far, " ");
  if (text.empty()) return false;
  int depth = 0;
  for (char c : text) depth += (c == '[' || c == '(') ? 1 : (c == ']' || c == ')') ? -1 : 0;
  if (depth > 0 || text.back() == ',' || w.front() == ',' || w.front() == ']' || w.front() == ')') return true;
  const auto number = [](const std::string& s) {
    const size_t from = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
    return s.size() > from && std::all_of(s.begin() + static_cast<std::ptrdiff_t>(from), s.end(),
                                          [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  };
  return std::all_of(so_far.begin(), so_far.end(), number) && number(w);
}



// The settings a command converts to, in the order found: one value per key.
class Settings {
 public:
  // key = value, set by the command's word `source` ("" = a default the
  // converter chose). A key set again must get the same value.
  void set(const std::string& key, const std::string& value, const std::string& source, const std::string& note) {
    for (const auto& s : list_) {
      if (s.key == key && s.value != value) {
        throw UsageError(std::string(kWhere) + s.source + " and " + source + ": expected one value for " + key +
                         ", got " + s.value + " and " + value);
      }
      if (s.key == key) return;
    }
    list_.push_back({key, value, source, note});
  }
  bool has(const std::string& key) const {
    return std::any_of(list_.begin(), list_.end(), [&](const Setting& s) { return s.key == key; });
  }
  std::vector<Setting>& list() { return list_; }
  const std::vector<Setting>& list() const { return list_; }

 private:
  std::vector<Setting> list_;
};

// The program part: environment assignments (into `env`), then the launcher,
// the interpreter and the script (`python runners/train.py`, `uv run python
// …`, `python -m module`, into out.program), unless the command is the
// overrides alone. Returns the index of the first word after it.
size_t read_program(const std::vector<ShellWord>& shell_words, const std::vector<std::string>& words,
                    std::vector<std::string>& env, ConvertedCommand& out) {
  size_t i = 0;
  for (; i < words.size(); ++i) {
    if (is_env_assignment(words[i])) {
      env.push_back(words[i]);
    } else if (words[i] == "env" && env.empty() && out.program.empty()) {
      out.program.push_back(words[i]);
    } else {
      break;
    }
  }
  if (i >= words.size() || looks_like_override(words[i])) return i;
  size_t j = i;
  bool found = false;
  while (j < words.size() && !found) {
    const std::string& w = words[j];
    if (w == "-m" && j + 1 < words.size()) {
      j += 2;
      found = true;
    } else if (ends_with(w, ".py")) {
      ++j;
      found = true;
    } else if (looks_like_override(w)) {
      break;
    } else {
      ++j;
    }
  }
  if (!found) {
    throw UsageError(std::string(kWhere) +
                     "expected the training program (python SCRIPT.py …, python -m MODULE …, uv run python …) "
                     "or key=value overrides, got \"" +
                     join_quoted(std::vector<std::string>(words.begin() + static_cast<std::ptrdiff_t>(i),
                                                          words.begin() + static_cast<std::ptrdiff_t>(j))) +
                     "\" at line " + std::to_string(shell_words[i].line) + ", column " +
                     std::to_string(shell_words[i].column));
  }
  out.program.insert(out.program.end(), words.begin() + static_cast<std::ptrdiff_t>(i),
                     words.begin() + static_cast<std::ptrdiff_t>(j));
  return j;
}

// The command's environment assignments: worker.env for --external, else
// the one dbh has a key for (CUDA_LAUNCH_BLOCKING); the others are unmapped.
void convert_environment(const std::vector<std::string>& env, const FromCommandOptions& options, Settings& settings,
                         nlohmann::ordered_json& worker_env, ConvertedCommand& out) {
  for (const auto& e : env) {
    const std::string name = e.substr(0, e.find('=')), value = e.substr(e.find('=') + 1);
    if (options.external) {
      worker_env[name] = value;
      out.worker_env.emplace_back(name, value);
      continue;
    }
    if (name == "CUDA_LAUNCH_BLOCKING" && (value == "0" || value == "1")) {
      settings.set(DBH_SCENARIO_KEY(hardware.launch_blocking), value == "1" ? "true" : "false", shell_quote(e), "");
    } else if (name == "CUDA_VISIBLE_DEVICES") {
      out.unmapped.push_back(shell_quote(e) + " (dbh names the GPU with " +
                             override_text(DBH_SCENARIO_KEY(hardware.device), "cuda:N") +
                             "; a variable set for dbh itself reaches its workers)");
    } else {
      out.unmapped.push_back(shell_quote(e) +
                             " (an environment variable with no dbh equivalent; one set for dbh itself "
                             "reaches its workers)");
    }
  }
}

// What reading the words found besides settings.
struct WordsRead {
  std::optional<std::string> accelerator;  // trainer.accelerator as written, when given
  bool accelerator_auto = false;
  std::vector<std::string> kept;  // --external: the words that stay in worker.command
};

// --external: a key dbh passes is dbh's from now on (a value the alias
// refuses is bad input); every other word is the user's and stays.
void read_external_word(const std::string& w, Settings& settings, WordsRead& read) {
  const auto& passed = worker_passed_keys();
  const size_t eq = w.find('=');
  const auto t = eq != std::string::npos && eq > 0 && w[0] != '-' && w[0] != '~'
                     ? translate_alias(w.substr(0, eq), w.substr(eq + 1))
                     : std::nullopt;
  if (t && t->kind == AliasTranslation::Kind::kInvalid) {
    throw UsageError(std::string(kWhere) + shell_quote(w) + ": " + describe_unmappable(*t, w.substr(eq + 1)));
  }
  if (t && t->kind == AliasTranslation::Kind::kMapped &&
      (std::find(passed.begin(), passed.end(), t->key) != passed.end() || t->key == DBH_SCENARIO_KEY(name))) {
    if (t->alias == "trainer.accelerator") read.accelerator = w.substr(eq + 1);
    settings.set(t->key, t->value, shell_quote(w), t->key == DBH_SCENARIO_KEY(name) ? "" : "passed back as " + t->alias);
  } else {
    read.kept.push_back(w);
  }
}

// The script's image size flag at words[i] (is_image_size_flag), with its
// value in the same word or the next ones: checked strictly, then read as
// Lightning's preprocessing.target_size. Returns the index of its last word.
size_t read_size_flag(const std::vector<ShellWord>& shell_words, const std::vector<std::string>& words, size_t i,
                      Settings& settings, ConvertedCommand& out) {
  const std::string& w = words[i];
  const std::string flag = w.substr(0, w.find('='));
  const std::string where = flag + " at line " + std::to_string(shell_words[i].line) + ", column " +
                            std::to_string(shell_words[i].column);
  std::vector<std::string> value_words;
  std::vector<std::string> item_words = {w};
  if (w.find('=') != std::string::npos) {
    value_words.push_back(w.substr(w.find('=') + 1));
  } else {
    if (i + 1 >= words.size()) {
      throw UsageError(std::string(kWhere) + where + ": expected a size after it (N or [N, N]), got the end "
                       "of the command");
    }
    const std::string& next = words[i + 1];
    if (next.size() > 1 && next[0] == '-' && !std::isdigit(static_cast<unsigned char>(next[1]))) {
      throw UsageError(std::string(kWhere) + where + ": expected a size after it (N or [N, N]), got the flag " +
                       shell_quote(truncate_utf8(next, 80)));
    }
    value_words.push_back(words[++i]);
    item_words.push_back(words[i]);
  }
  while (i + 1 < words.size() && continues_size(value_words, words[i + 1])) {
    value_words.push_back(words[++i]);
    item_words.push_back(words[i]);
  }
  // Plain numbers in separate words (argparse's nargs=2) are a list.
  const bool plain = std::none_of(value_words.begin(), value_words.end(), [](const std::string& v) {
    return v.find_first_of(",[]()") != std::string::npos;
  });
  const std::string value = join_words(value_words, plain ? "," : " ");
  const ImageSize size = parse_image_size(std::string(kWhere) + where, value);
  const std::string canonical = size.width == size.height
                                    ? std::to_string(size.width)
                                    : "[" + std::to_string(size.width) + ", " + std::to_string(size.height) + "]";
  const std::string item = join_quoted(item_words);
  const auto t = translate_alias("preprocessing.target_size", canonical);
  if (t && t->kind == AliasTranslation::Kind::kMapped) {
    settings.set(t->key, t->value, item, "the script's image size, as preprocessing.target_size");
  } else if (t) {
    out.unmapped.push_back(item + " (" + t->reason + (t->expected.empty() ? "" : "; accepted: " + t->expected) + ")");
  }
  return i;
}

// Any other flag at words[i], with the value of Hydra's flags that take one:
// unmapped, saying why. Returns the index of its last word.
size_t read_other_flag(const std::vector<std::string>& words, size_t i, ConvertedCommand& out) {
  static const std::vector<std::string> kConfigFlags = {"--config-name", "-cn",          "--config-path",
                                                        "-cp",           "--config-dir", "-cd"};
  static const std::vector<std::string> kValueFlags = {"--cfg", "-c", "--package", "-p"};
  const std::string& w = words[i];
  const std::string flag = w.substr(0, w.find('='));
  const bool config = std::find(kConfigFlags.begin(), kConfigFlags.end(), flag) != kConfigFlags.end();
  std::string item = shell_quote(w);
  if ((config || std::find(kValueFlags.begin(), kValueFlags.end(), flag) != kValueFlags.end()) &&
      w.find('=') == std::string::npos && i + 1 < words.size()) {
    item += " " + shell_quote(words[++i]);
  }
  if (config) {
    out.unmapped.push_back(item + " (dbh converts the command's key=value overrides, not Hydra config files)");
  } else if (w == "-m" || w == "--multirun") {
    out.unmapped.push_back(item + " (a Hydra sweep: one dbh scenario per value, or dbh bisect range)");
  } else {
    out.unmapped.push_back(item + " (a flag of the script or of Hydra; dbh converts key=value overrides)");
  }
  return i;
}

// A key=value override (`w`, at `where`): translated through the aliases.
void read_override(const ShellWord& where, const std::string& w, const FromCommandOptions& options,
                   Settings& settings, WordsRead& read, ConvertedCommand& out) {
  const std::string shown = shell_quote(w);  // as the command can be typed again
  const size_t eq = w.find('=');
  if (eq == std::string::npos || eq == 0) {
    out.unmapped.push_back(shown + " (not a key=value override)");
    return;
  }
  const std::string key = w.substr(0, eq), value = w.substr(eq + 1);
  if (hydra_key(key) == "preprocessing.target_size") {
    // The alias reads brackets loosely ("[640" is 640): check the list
    // first, as Hydra would parse it (one pair of quotes removed).
    std::string v = value;
    if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) v = v.substr(1, v.size() - 2);
    (void)parse_image_size(std::string(kWhere) + key + " at line " + std::to_string(where.line) + ", column " +
                               std::to_string(where.column),
                           v);
  }
  const auto t = translate_alias(key, value);
  if (!t) {
    // The dataset the command names, given as --data too: the scenario
    // trains on it (data.path), so it is mapped, not lost.
    std::error_code same_ec;
    const bool is_data = !options.data.empty() && !value.empty() &&
                         std::filesystem::equivalent(value, options.data, same_ec) && !same_ec;
    out.unmapped.push_back(shown + (is_data ? " (the same folder as --data: " + std::string(DBH_SCENARIO_KEY(data.path)) +
                                                  " below)"
                                            : std::string(" (no dbh equivalent known)")));
    return;
  }
  if (t->alias == "trainer.accelerator") {
    read.accelerator = value;
    read.accelerator_auto = t->kind == AliasTranslation::Kind::kUnmapped && unquoted_lower(value) == "auto";
    if (read.accelerator_auto) return;  // the device default says what auto becomes
  }
  switch (t->kind) {
    case AliasTranslation::Kind::kMapped:
      settings.set(t->key, t->value, shown, t->reason);
      break;
    case AliasTranslation::Kind::kSatisfied:
      out.satisfied.push_back(shown + " (" + t->reason + ")");
      break;
    case AliasTranslation::Kind::kUnmapped:
      out.unmapped.push_back(shown + " (" + t->reason + (t->expected.empty() ? "" : "; accepted: " + t->expected) +
                             ")");
      break;
    case AliasTranslation::Kind::kInvalid:
      throw UsageError(std::string(kWhere) + shown + ": " + describe_unmappable(*t, value));
  }
}

// The words after the program, from words[i] on.
WordsRead read_words(const std::vector<ShellWord>& shell_words, const std::vector<std::string>& words, size_t i,
                     const FromCommandOptions& options, Settings& settings, ConvertedCommand& out) {
  WordsRead read;
  for (; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (options.external) {
      read_external_word(w, settings, read);
    } else if (w.empty()) {
      out.unmapped.push_back("'' (an empty word)");
    } else if (w[0] == '-' && is_image_size_flag(w.substr(0, w.find('=')))) {
      i = read_size_flag(shell_words, words, i, settings, out);
    } else if (w[0] == '-') {
      i = read_other_flag(words, i, out);
    } else if (w[0] == '~') {
      out.unmapped.push_back(shell_quote(w) + " (deletes a config key; dbh has no equivalent)");
    } else {
      read_override(shell_words[i], w, options, settings, read, out);
    }
  }
  return read;
}

// Lightning's accelerator defaults to auto, which trains on the GPU of a
// machine with one: the scenario says so unless a base names the device.
void set_device_default(const FromCommandOptions& options, const WordsRead& read, Settings& settings,
                        ConvertedCommand& out) {
  const bool device_set = settings.has(DBH_SCENARIO_KEY(hardware.device));
  if (options.external && !device_set && options.include.empty()) {
    // The user's own command on this machine: the device auto would pick here.
    settings.set(DBH_SCENARIO_KEY(hardware.device), options.has_gpu ? "cuda" : "cpu", "",
                 options.has_gpu ? "this machine has an NVIDIA GPU, which Lightning's auto picks"
                                 : "this machine has no NVIDIA GPU; on one, " +
                                       override_text(DBH_SCENARIO_KEY(hardware.device), "cuda") + " trains on it");
  } else if (!options.external && !device_set && (!read.accelerator || read.accelerator_auto)) {
    const std::string source = read.accelerator ? shell_quote("trainer.accelerator=" + *read.accelerator) : "";
    if (options.include.empty()) {
      settings.set(DBH_SCENARIO_KEY(hardware.device), "cuda", source,
                   std::string(read.accelerator ? "" : "trainer.accelerator not given: ") +
                       "Lightning's auto trains on the GPU; " + override_text(DBH_SCENARIO_KEY(hardware.device), "cpu") +
                       " runs it on the CPU");
    } else if (read.accelerator) {
      out.unmapped.push_back(source + " (auto picks the GPU when there is one; the base's " +
                             DBH_SCENARIO_KEY(hardware.device) + " applies)");
    }
  }
}

// The name (--name, else exp_name, else "from-command"), the description,
// the base (--base) and the dataset (--data).
void set_scenario_identity(const FromCommandOptions& options, const std::string& one_line_command,
                           Settings& settings, ConvertedCommand& out) {
  std::string name_value;
  auto& list = settings.list();
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (it->key == DBH_SCENARIO_KEY(name)) {
      name_value = it->value;
      if (!options.name.empty()) {
        out.unmapped.push_back(it->source + " (--name " + options.name + " names the scenario)");
        list.erase(it);
      }
      break;
    }
  }
  if (!options.name.empty()) {
    if (one_line(options.name) != options.name || options.name.size() > 200) {
      throw UsageError(std::string(kWhere) + "--name: expected a one-line name of printable UTF-8 (at most 200 "
                       "bytes), got \"" + one_line(options.name).substr(0, 200) + "\"");
    }
    settings.set(DBH_SCENARIO_KEY(name), nlohmann::json(options.name).dump(), "", "--name");
  } else if (name_value.empty()) {
    settings.set(DBH_SCENARIO_KEY(name), "from-command", "", "");
  }
  settings.set(DBH_SCENARIO_KEY(description),
               nlohmann::json("Converted from the training command: " + one_line_command).dump(), "", "");
  if (!options.include.empty()) {
    // A YAML file is UTF-8: a path that is not cannot be written into it.
    if (valid_utf8(options.include) != options.include) {
      throw UsageError(std::string(kWhere) + "--base: expected a path of valid UTF-8 (a scenario is a UTF-8 "
                       "file), got \"" + valid_utf8(options.include) + "\"");
    }
    settings.set("include", nlohmann::json(options.include).dump(), "", "--base");
  }
  if (!options.data.empty()) {
    if (valid_utf8(options.data) != options.data) {
      throw UsageError(std::string(kWhere) + "--data: expected a path of valid UTF-8, got \"" +
                       valid_utf8(options.data) + "\"");
    }
    settings.set(DBH_SCENARIO_KEY(data.source), "real", "--data", "");
    settings.set(DBH_SCENARIO_KEY(data.path), nlohmann::json(options.data).dump(), "--data", "");
  }
}

// --external with the command's composed configuration: Note [dbh's keys in
// your configuration]. Each dbh key a key of the user's holds takes that
// key's value (a word of the command that set it leaves the command: dbh
// passes it back); one nothing holds is passed as nothing. Returns
// worker.keys.
nlohmann::ordered_json map_into_user_config(const FromCommandOptions& options, WordsRead& read, Settings& settings,
                                            ConvertedCommand& out) {
  std::vector<std::string> command_keys;
  for (const auto& w : read.kept) {
    const size_t eq = w.find('=');
    if (eq != std::string::npos && eq > 0 && w[0] != '-') command_keys.push_back(hydra_key(w.substr(0, eq)));
  }
  // A relative dataset path is the training's: from where it runs, or
  // from its script's folder.
  std::vector<std::string> folders = {options.cwd};
  for (const auto& w : out.program) {
    if (ends_with(w, ".py")) {
      folders.push_back((std::filesystem::path(options.cwd) / w).parent_path().lexically_normal().string());
      break;
    }
  }
  nlohmann::ordered_json keys = nlohmann::ordered_json::object();
  for (const auto& m : map_user_config(*options.user_config, command_keys, folders)) {
    keys[m.dbh_key] = m.user_key;
    if (m.user_key.empty()) {
      out.unmapped.push_back(m.dbh_key + " (" + m.why + "; dbh passes nothing for it)");
      continue;
    }
    const std::string value = m.value.dump();
    read.kept.erase(std::remove_if(read.kept.begin(), read.kept.end(),
                                   [&](const std::string& w) {
                                     const size_t eq = w.find('=');
                                     return eq != std::string::npos && hydra_key(w.substr(0, eq)) == m.user_key;
                                   }),
                    read.kept.end());
    if (m.dbh_key == DBH_SCENARIO_KEY(data.path)) {
      if (!options.data.empty()) continue;  // --data names the dataset
      settings.set(DBH_SCENARIO_KEY(data.source), "real", "", "");
    }
    if (!settings.has(m.dbh_key)) {
      settings.set(m.dbh_key, value, "your configuration's " + m.user_key, "passed back as " + m.user_key);
    }
    out.mapped.push_back(m.dbh_key + ": " + m.user_key + " (" + one_line(truncate_utf8(value, 120)) + ")");
  }
  return keys;
}

// --external: the worker keys (the command as written less the keys dbh
// passes, where it runs, its environment, the key of the dataset folder).
void set_external_worker(const FromCommandOptions& options, const WordsRead& read,
                         const nlohmann::ordered_json& worker_env, nlohmann::ordered_json keys, Settings& settings,
                         ConvertedCommand& out) {
  if (options.data.empty()) {
    settings.set(DBH_SCENARIO_KEY(data.source), "real", "",
                 "the dataset your configuration names (--data DIR for dbh to pass one)");
  }
  std::vector<std::string> command = out.program;
  command.insert(command.end(), read.kept.begin(), read.kept.end());
  if (command.empty()) {
    throw UsageError(std::string(kWhere) + "--external: expected a training program to run (python SCRIPT.py …), "
                     "got overrides alone");
  }
  out.worker_command = command;
  settings.set(DBH_SCENARIO_KEY(worker.command), nlohmann::json(command).dump(), "",
               "run as written, less the keys dbh passes");
  settings.set(DBH_SCENARIO_KEY(worker.cwd), nlohmann::json(options.cwd).dump(), "", "where from-command ran");
  if (!worker_env.empty()) settings.set(DBH_SCENARIO_KEY(worker.env), worker_env.dump(), "", "");
  if (!options.data.empty()) {
    const std::string mapped = keys.value(DBH_SCENARIO_KEY(data.path), std::string());
    if (options.data_key.empty() && mapped.empty()) {
      throw UsageError(std::string(kWhere) + "--data with --external: expected --data-key KEY, the key of your "
                       "configuration that holds the dataset folder (e.g. datasets.train.path), got none");
    }
    keys[DBH_SCENARIO_KEY(data.path)] = options.data_key.empty() ? mapped : options.data_key;
  }
  if (!keys.empty()) {
    settings.set(DBH_SCENARIO_KEY(worker.keys), keys.dump(), options.data_key.empty() ? "" : "--data-key",
                 options.user_config ? "dbh's keys in your configuration" : "");
  }
  out.program.clear();  // it is in the scenario now
}

// The scenario's text: what the command said and what it did not, then the
// settings, nested by section.
std::string scenario_text(const std::string& one_line_command, const ConvertedCommand& out, Settings& settings,
                          const FromCommandOptions& options) {
  std::ostringstream y;
  y << "# Generated by `dbh scenario from-command` from:\n#   " << one_line_command << "\n";
  if (!out.program.empty()) y << "# Program (not part of the scenario): " << one_line(join_quoted(out.program)) << "\n";
  y << "# Unmapped (not in this scenario):" << (out.unmapped.empty() ? " none" : "") << "\n";
  for (const auto& u : out.unmapped)
    y << "#   " << one_line(u) << "\n";
  if (!out.satisfied.empty()) {
    y << "# Already so in dbh:\n";
    for (const auto& s : out.satisfied)
      y << "#   " << one_line(s) << "\n";
  }
  if (options.external && options.user_config) {
    y << "# Your command runs under dbh as its worker (docs/worker-protocol.md). dbh's keys in your configuration, "
      << "as your command composed it, by name and by what they hold (worker.keys passes each back in your name):"
      << (out.mapped.empty() ? " none" : "") << "\n";
    for (const auto& m : out.mapped) y << "#   " << one_line(m) << "\n";
  } else if (options.external) {
    y << "# Your command runs under dbh as its worker (docs/worker-protocol.md): the keys dbh passes ("
      << join(worker_passed_keys()) << ") are dbh's below and reach it as key=value; the other words stay in "
      << "worker.command.\n";
  } else if (options.include.empty()) {
    const DataConfig data;
    const TrainConfig train;
    std::ostringstream defaults;
    // ", key value" for a default the command's settings leave in place.
    auto unless_set = [&](const char* key, const auto& value) {
      if (!settings.has(key)) defaults << ", " << key << " " << value;
    };
    if (!settings.has(DBH_SCENARIO_KEY(data.source))) {
      defaults << ", " << DBH_SCENARIO_KEY(data.source) << " " << to_string(data.source) << " (your dataset: "
               << DBH_SCENARIO_KEY(data.source) << " real, " << DBH_SCENARIO_KEY(data.path) << " DIR)";
    }
    unless_set(DBH_SCENARIO_KEY(data.size), data.size);
    unless_set(DBH_SCENARIO_KEY(train.max_steps), train.max_steps);
    defaults << ", " << DBH_SCENARIO_KEY(train.optimizer) << " " << model::to_string(train.optimizer);
    unless_set(DBH_SCENARIO_KEY(train.lr), train.lr);
    y << "# Not on the command line, so dbh's defaults apply: " << defaults.str().substr(2) << "\n";
  } else {
    y << "# Not on the command line: the base (include) or dbh's defaults apply.\n";
  }
  auto& list = settings.list();
  std::stable_sort(list.begin(), list.end(), [](const Setting& a, const Setting& b) {
    const int ra = section_rank(a.key), rb = section_rank(b.key);
    if (ra != rb) return ra < rb;
    return parent_of(a.key) < parent_of(b.key);
  });
  std::vector<std::string> prev;
  for (const auto& s : list) {
    const std::vector<std::string> parts = split_key(s.key);
    size_t common = 0;
    while (common + 1 < parts.size() && common + 1 < prev.size() && parts[common] == prev[common])
      ++common;
    for (size_t d = common; d + 1 < parts.size(); ++d)
      y << std::string(2 * d, ' ') << parts[d] << ":\n";
    y << std::string(2 * (parts.size() - 1), ' ') << parts.back() << ": " << s.value;
    std::string comment = s.source;
    if (!s.note.empty()) comment += (comment.empty() ? "" : " (") + s.note + (comment.empty() ? "" : ")");
    if (!comment.empty() && s.key != "description") y << "  # " << one_line(comment);
    y << "\n";
    prev = parts;
  }
  return y.str();
}

}  // namespace

ConvertedCommand scenario_from_command(const std::string& command, const FromCommandOptions& options) {
  const std::vector<ShellWord> shell_words = split_shell_words(command);
  std::vector<std::string> words;
  for (const auto& w : shell_words)
    words.push_back(w.text);
  if (words.empty()) {
    throw UsageError(std::string(kWhere) +
                     "expected a training command such as \"python runners/train.py key=value …\", got an empty "
                     "command");
  }
  ConvertedCommand out;
  Settings settings;
  std::vector<std::string> env;
  const size_t first = read_program(shell_words, words, env, out);
  nlohmann::ordered_json worker_env = nlohmann::ordered_json::object();
  convert_environment(env, options, settings, worker_env, out);
  WordsRead read = read_words(shell_words, words, first, options, settings, out);
  set_device_default(options, read, settings, out);
  const std::string one_line_command = one_line(join_quoted(words));
  set_scenario_identity(options, one_line_command, settings, out);
  if (options.external) {
    nlohmann::ordered_json keys = options.user_config ? map_into_user_config(options, read, settings, out)
                                                      : nlohmann::ordered_json::object();
    set_external_worker(options, read, worker_env, std::move(keys), settings, out);
  }
  out.yaml = scenario_text(one_line_command, out, settings, options);
  return out;
}

}  // namespace dbh::harness::scenario
