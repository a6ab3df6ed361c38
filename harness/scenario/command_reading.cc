#include "harness/scenario/command_reading.h"

#include <cctype>

#include "harness/common/text.h"
#include "harness/scenario/aliases.h"
#include "harness/scenario/scenario.h"
#include "harness/scenario/schema.h"

namespace dbh::harness::scenario::internal {
namespace {

constexpr const char* kWhere = kFromCommandWhere;

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


std::string join_words(const std::vector<std::string>& words, const std::string& separator) {
  std::string out;
  for (const auto& w : words)
    out += (out.empty() ? "" : separator) + w;
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

}  // namespace

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string join_quoted(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words)
    out += (out.empty() ? "" : " ") + shell_quote(w);
  return out;
}

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

}  // namespace dbh::harness::scenario::internal
