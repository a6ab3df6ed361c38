#include "harness/scenario/from_command.h"

#include <algorithm>
#include <filesystem>
#include <cctype>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/common/json_fields.h"
#include "harness/common/text.h"
#include "harness/common/value.h"
#include "harness/scenario/aliases.h"
#include "harness/scenario/command_reading.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::scenario {
namespace {

constexpr const char* kWhere = internal::kFromCommandWhere;
using internal::Settings;
using internal::Setting;
using internal::WordsRead;
using internal::ends_with;
using internal::join_quoted;

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

// A key's place when the worker reported no parser: the command's word
// that holds the configuration's value, as an option's value (`--data DIR`)
// or a word of its own (`@N`); "" when no word holds it.
std::string place_by_value(const std::vector<std::string>& command, const nlohmann::json& value) {
  if (!value.is_string() || value.get<std::string>().empty()) return "";
  const std::string v = value.get<std::string>();
  for (size_t i = first_argument(command); i < command.size(); ++i) {
    const std::string& w = command[i];
    if (w.size() > v.size() && w[0] == '-' && w.compare(w.size() - v.size() - 1, std::string::npos, "=" + v) == 0) {
      return w.substr(0, w.size() - v.size() - 1);
    }
    if (w != v) continue;
    const std::string& before = command[i - 1];
    const bool option = i > first_argument(command) && before.size() > 1 && before[0] == '-' &&
                        before.find('=') == std::string::npos;
    return option ? before : "@" + std::to_string(i);
  }
  return "";
}

// Why dbh's key cannot hold `value` (a YAML flow scalar), as the scenario
// loader says it; "" when it can.
std::string refused_value(const std::string& dbh_key, const std::string& value) {
  try {
    Value root;
    root.kind = Value::Kind::kMap;
    apply_override(root, dbh_key + "=" + value);
    const std::string section = dbh_key.substr(0, dbh_key.find('.'));
    Scenario probe;
    read_section(root.find(section), section, probe);
  } catch (const ScenarioError& e) {
    const std::string what = e.what();
    const size_t at = what.find(dbh_key + ": ");
    return at == std::string::npos ? what : what.substr(at + dbh_key.size() + 2);
  }
  return "";
}

// The keys the command's words set: `key=value` words, the destinations of
// the reported parser's options it writes, the dotted options it writes.
std::vector<std::string> keys_the_command_sets(const std::vector<std::string>& command,
                                               const std::vector<ParserOption>& parser) {
  std::vector<std::string> keys;
  for (size_t i = first_argument(command); i < command.size(); ++i) {
    const std::string& w = command[i];
    const size_t eq = w.find('=');
    if (eq != std::string::npos && eq > 0 && w[0] != '-') keys.push_back(hydra_key(w.substr(0, eq)));
    if (w.rfind("--", 0) == 0) keys.push_back(w.substr(2, w.find('=') == std::string::npos ? std::string::npos : w.find('=') - 2));
    for (const auto& o : parser) {
      if (std::find(o.strings.begin(), o.strings.end(), w.substr(0, eq)) != o.strings.end()) keys.push_back(o.dest);
    }
  }
  for (const auto& [dest, word] : positional_words(command, parser)) keys.push_back(dest);
  return keys;
}

// --external with the command's composed configuration: Note [dbh's keys in
// your configuration]. Each dbh key a key of the user's holds takes that
// key's value; one nothing holds is passed as nothing. How the command
// writes each key (Note [A command's own syntax]) goes into `worker`:
// its syntax, and written_as for an option, a switch, a positional word or
// a key of a config file. Returns worker.keys.
nlohmann::ordered_json map_into_user_config(const FromCommandOptions& options, WordsRead& read, Settings& settings,
                                            ConvertedCommand& out, WorkerConfig& worker) {
  worker.command = out.program;
  worker.command.insert(worker.command.end(), read.kept.begin(), read.kept.end());
  const DetectedSyntax syntax = detect_syntax(worker.command, !options.parser_options.empty());
  worker.syntax = syntax.syntax;
  worker.syntax_option = syntax.option;
  // Options and one config file the command names, with no syntax to
  // override the file's keys (MhLiao/DB): a key that is no option is the
  // file's, set in a copy.
  if (syntax.syntax == CommandSyntax::kFlags && !syntax.dotted_flags && options.config_files.size() == 1) {
    worker.syntax = CommandSyntax::kFile;
    worker.syntax_option = "@" + std::to_string(options.config_files.front().first);
  }
  const std::vector<std::string> command_keys = keys_the_command_sets(worker.command, options.parser_options);
  // The configuration the worker reported, then the keys only a config file
  // the command names holds.
  std::vector<ConfigEntry> config = *options.user_config;
  std::map<std::string, size_t> file_word;
  for (const auto& [word, entries] : options.config_files) {
    for (const auto& e : entries) {
      if (file_word.count(e.first) == 0) file_word[e.first] = word;
      const bool known = std::any_of(config.begin(), config.end(), [&](const ConfigEntry& c) { return c.first == e.first; });
      if (!known) config.push_back(e);
    }
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
  std::vector<std::pair<KeyMapping, std::string>> found;  // with the scenario's value text
  for (const auto& m : map_user_config(config, command_keys, folders)) {
    if (!m.user_key.empty()) {
      if (const std::string why = refused_value(m.dbh_key, m.value.dump()); !why.empty()) {
        keys[m.dbh_key] = "";
        out.unmapped.push_back(m.dbh_key + " (your configuration's " + m.user_key + " holds " +
                               one_line(truncate_utf8(m.value.dump(), 80)) + ", but dbh's key " + why +
                               "; dbh passes nothing for it)");
        continue;
      }
    }
    keys[m.dbh_key] = m.user_key;
    if (m.user_key.empty()) {
      out.unmapped.push_back(m.dbh_key + " (" + m.why + "; dbh passes nothing for it)");
      continue;
    }
    const auto option = std::find_if(options.parser_options.begin(), options.parser_options.end(),
                                     [&](const ParserOption& o) { return o.dest == m.user_key; });
    std::string place;
    if (option != options.parser_options.end()) {
      place = place_of(*option, worker.command, options.parser_options);
    } else if (file_word.count(m.user_key) > 0 && syntax.syntax != CommandSyntax::kOption && !syntax.dotted_flags) {
      const std::string in_file = "@" + std::to_string(file_word[m.user_key]);
      if (worker.syntax != CommandSyntax::kFile || worker.syntax_option != in_file) place = in_file + ":" + m.user_key;
    } else if (syntax.syntax != CommandSyntax::kKeyValue || options.parser_options.empty()) {
      const std::string by_value = place_by_value(worker.command, m.value);
      if (!by_value.empty() && (by_value[0] == '@' || syntax.syntax != CommandSyntax::kKeyValue)) place = by_value;
    }
    if (!place.empty()) worker.written_as[m.user_key] = place;
    if (worker.syntax == CommandSyntax::kKeyValue && place.empty()) {
      // Hydra: the word that set it leaves the command; dbh passes it back.
      read.kept.erase(std::remove_if(read.kept.begin(), read.kept.end(),
                                     [&](const std::string& w) {
                                       const size_t eq = w.find('=');
                                       return eq != std::string::npos && w[0] != '-' &&
                                              hydra_key(w.substr(0, eq)) == m.user_key;
                                     }),
                      read.kept.end());
    }
    const std::string value = m.value.dump();
    if (m.dbh_key == DBH_SCENARIO_KEY(data.path)) {
      if (!options.data.empty()) continue;  // --data names the dataset
      settings.set(DBH_SCENARIO_KEY(data.source), "real", "", "");
    }
    if (!settings.has(m.dbh_key)) {
      settings.set(m.dbh_key, value, "your configuration's " + m.user_key, "passed back as " + m.user_key);
    }
    found.emplace_back(m, value);
  }
  worker.command = out.program;
  worker.command.insert(worker.command.end(), read.kept.begin(), read.kept.end());
  // The parser's other options that `--dest value` would not reach (a
  // switch, other option strings, a positional word): an override of the
  // user's own key, or `bisect config --bad` in the command's spelling,
  // finds them.
  for (const auto& o : options.parser_options) {
    if (worker.written_as.count(o.dest) > 0) continue;
    const std::string place = place_of(o, worker.command, options.parser_options);
    const bool flags = worker.syntax == CommandSyntax::kFlags;  // `--dest value` is the syntax's own
    if (!place.empty() && (place != "--" + o.dest || !flags)) worker.written_as[o.dest] = place;
  }
  for (const auto& [m, value] : found) {
    // As the configuration holds it: what dbh passes back unchanged.
    const std::string& user_key = m.user_key;  // a structured binding is no lambda capture before C++20
    const auto held = std::find_if(config.begin(), config.end(), [&](const ConfigEntry& c) { return c.first == user_key; });
    const bool resolved = m.dbh_key == DBH_SCENARIO_KEY(data.path);  // a folder made absolute
    const nlohmann::json& as_held = held != config.end() && !resolved ? held->second : m.value;
    const std::string shown = as_held.is_string() ? as_held.get<std::string>() : as_held.dump();
    out.mapped.push_back(m.dbh_key + ": " + m.user_key + " (" + one_line(truncate_utf8(value, 120)) + "), passed as " +
                         one_line(truncate_utf8(describe_argument(worker, m.user_key, shown), 160)));
  }
  return keys;
}

// --external: the worker keys (the command as written less the keys dbh
// passes, where it runs, its environment, the key of the dataset folder).
void set_external_worker(const FromCommandOptions& options, const WordsRead& read,
                         const nlohmann::ordered_json& worker_env, nlohmann::ordered_json keys,
                         const WorkerConfig& worker, Settings& settings, ConvertedCommand& out) {
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
  const bool hydra = worker.syntax == CommandSyntax::kKeyValue;
  settings.set(DBH_SCENARIO_KEY(worker.command), nlohmann::json(command).dump(), "",
               hydra ? "run as written, less the key=value words dbh passes back"
                     : "run as written; dbh sets its keys where they stand");
  if (!hydra) {
    settings.set(DBH_SCENARIO_KEY(worker.syntax), to_string(worker.syntax), "",
                 worker.syntax == CommandSyntax::kFlags    ? "your command's options: --key value"
                 : worker.syntax == CommandSyntax::kOption ? "key=value words after " + worker.syntax_option
                                                           : "keys of the file the command's word " +
                                                                 worker.syntax_option.substr(1) +
                                                                 " names, set in a copy");
  }
  if (worker.syntax == CommandSyntax::kOption || worker.syntax == CommandSyntax::kFile) {
    settings.set(DBH_SCENARIO_KEY(worker.syntax_option), nlohmann::json(worker.syntax_option).dump(), "", "");
  }
  if (!worker.written_as.empty()) {
    nlohmann::ordered_json written = nlohmann::ordered_json::object();
    for (const auto& [k, v] : worker.written_as) written[k] = v;
    settings.set(DBH_SCENARIO_KEY(worker.written_as), written.dump(), "",
                 "how your command writes these keys (@N: its word N; @N:key: a key of the file word N names, "
                 "set in a copy)");
  }
  settings.set(DBH_SCENARIO_KEY(worker.cwd), nlohmann::json(options.cwd).dump(), "", "where from-command ran");
  if (!worker_env.empty()) settings.set(DBH_SCENARIO_KEY(worker.env), worker_env.dump(), "", "");
  if (!options.data.empty()) {
    const std::string mapped = field_or(keys, DBH_SCENARIO_KEY(data.path), std::string());
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
      << "as your command composed it, by name and by what they hold (worker.keys passes each back in your name, "
      << "in your command's syntax):"
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
  const size_t first = internal::read_program(shell_words, words, env, out);
  nlohmann::ordered_json worker_env = nlohmann::ordered_json::object();
  internal::convert_environment(env, options, settings, worker_env, out);
  WordsRead read = internal::read_words(shell_words, words, first, options, settings, out);
  set_device_default(options, read, settings, out);
  const std::string one_line_command = one_line(join_quoted(words));
  set_scenario_identity(options, one_line_command, settings, out);
  if (options.external) {
    WorkerConfig worker;
    nlohmann::ordered_json keys = options.user_config ? map_into_user_config(options, read, settings, out, worker)
                                                      : nlohmann::ordered_json::object();
    set_external_worker(options, read, worker_env, std::move(keys), worker, settings, out);
  }
  out.yaml = scenario_text(one_line_command, out, settings, options);
  return out;
}

}  // namespace dbh::harness::scenario
