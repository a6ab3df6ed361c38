#include "harness/scenario/command_syntax.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "harness/common/error.h"
#include "harness/common/text.h"
#include "harness/scenario/aliases.h"

namespace dbh::harness::scenario {
namespace {

constexpr const char* kPlaceForms =
    "`--option` or `--option|-o` (an option and its other strings), `on:--switch` or `off:--switch` (a switch "
    "present when the value is true or false), `@N` (the command's word N) or `@N:key` (a key of the YAML or JSON "
    "file the command's word N names)";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t from = 0;
  for (;;) {
    const size_t at = text.find(sep, from);
    out.push_back(text.substr(from, at == std::string::npos ? std::string::npos : at - from));
    if (at == std::string::npos) return out;
    from = at + 1;
  }
}

bool option_string(const std::string& s) {
  return s.size() >= 2 && s[0] == '-' && s != "--" && std::none_of(s.begin(), s.end(), [](char c) {
           return c == '=' || c == '|' || std::isspace(static_cast<unsigned char>(c)) ||
                  std::iscntrl(static_cast<unsigned char>(c));
         });
}

bool truthy(const std::string& value) {
  std::string v = value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return v == "true" || v == "1" || v == "yes" || v == "on";
}

// The words of the command, each becoming zero or more words of the argv:
// a word is replaced where it stands, removed, or followed by new words.
class Slots {
 public:
  Slots(const std::vector<std::string>& command, size_t first) : command_(command), first_(first) {
    for (const auto& w : command) slots_.push_back({w});
  }
  size_t first() const { return first_; }
  size_t size() const { return command_.size(); }
  // The command's word i as written, or nullptr once removed.
  const std::string* word(size_t i) const { return slots_[i].empty() ? nullptr : &command_[i]; }
  // The word itself; words inserted after it stay.
  void replace(size_t i, std::string w) {
    if (slots_[i].empty()) {
      slots_[i] = {std::move(w)};
    } else {
      slots_[i][0] = std::move(w);
    }
  }
  void remove(size_t i) { slots_[i].clear(); }
  void insert_after(size_t i, std::string w) { slots_[i].push_back(std::move(w)); }
  void append(std::string w) { appended_.push_back(std::move(w)); }
  // A `key=value` word for `option` when the command has none: all such
  // words go after one `option`, at the end.
  void append_pair(const std::string& option, std::string w) {
    option_ = option;
    pairs_.push_back(std::move(w));
  }

  WorkerArgv finish(std::vector<FileEdit> edits) const {
    WorkerArgv out;
    std::vector<size_t> at(slots_.size(), 0);
    for (size_t i = 0; i < slots_.size(); ++i) {
      at[i] = out.argv.size();
      out.argv.insert(out.argv.end(), slots_[i].begin(), slots_[i].end());
    }
    out.argv.insert(out.argv.end(), appended_.begin(), appended_.end());
    if (!pairs_.empty()) {
      out.argv.push_back(option_);
      out.argv.insert(out.argv.end(), pairs_.begin(), pairs_.end());
    }
    for (const auto& e : edits) {
      const bool listed = std::any_of(out.file_word_at.begin(), out.file_word_at.end(),
                                      [&](const auto& p) { return p.first == e.word; });
      if (!listed) out.file_word_at.emplace_back(e.word, at[e.word]);
    }
    out.file_edits = std::move(edits);
    return out;
  }

 private:
  const std::vector<std::string>& command_;
  size_t first_;
  std::vector<std::vector<std::string>> slots_;
  std::vector<std::string> appended_;
  std::string option_;
  std::vector<std::string> pairs_;
};

// `--key value` (or `--key=value`) for every spelling in `strings`, where
// it stands; appended when the command has none.
void set_option(Slots& slots, const std::vector<std::string>& strings, const std::string& value) {
  bool found = false;
  for (size_t i = slots.first(); i < slots.size(); ++i) {
    const std::string* w = slots.word(i);
    if (w == nullptr) continue;
    if (std::find(strings.begin(), strings.end(), *w) != strings.end()) {
      found = true;
      if (i + 1 < slots.size()) {
        slots.replace(++i, value);
      } else {
        slots.insert_after(i, value);
      }
      continue;
    }
    for (const auto& s : strings) {
      if (w->rfind(s + "=", 0) == 0) {
        slots.replace(i, s + "=" + value);
        found = true;
        break;
      }
    }
  }
  if (found) return;
  // A value that starts with '-' would read as an option: joined with '='.
  if (!value.empty() && value[0] == '-' && strings.front().rfind("--", 0) == 0) {
    slots.append(strings.front() + "=" + value);
  } else {
    slots.append(strings.front());
    slots.append(value);
  }
}

void set_switch(Slots& slots, const std::vector<std::string>& strings, bool present) {
  bool found = false;
  for (size_t i = slots.first(); i < slots.size(); ++i) {
    const std::string* w = slots.word(i);
    if (w == nullptr || std::find(strings.begin(), strings.end(), *w) == strings.end()) continue;
    found = true;
    if (!present) slots.remove(i);
  }
  if (present && !found) slots.append(strings.front());
}

// The key a `key=value` word sets, without Hydra's `+`/`++`; "" for any
// other word.
std::string key_of_pair(const std::string& w) {
  const size_t eq = w.find('=');
  if (eq == std::string::npos || eq == 0 || w[0] == '-') return "";
  return hydra_key(w.substr(0, eq));
}

void set_key_value(Slots& slots, const std::string& key, const std::string& value) {
  bool found = false;
  for (size_t i = slots.first(); i < slots.size(); ++i) {
    const std::string* w = slots.word(i);
    if (w == nullptr || key_of_pair(*w) != key) continue;
    const std::string prefix = w->rfind("++", 0) == 0 ? "++" : w->rfind('+', 0) == 0 ? "+" : "";
    slots.replace(i, prefix + key + "=" + value);
    found = true;
  }
  if (!found) slots.append(key + "=" + value);
}

// `key=value` among the words after `option` (PaddleOCR's `-o a=1 b=2`):
// replaced where it stands, else added to the option's last group, else
// appended with the option.
void set_option_pair(Slots& slots, const std::string& option, const std::string& key, const std::string& value) {
  bool found = false;
  std::optional<size_t> last;  // the last word of the option's last group
  for (size_t i = slots.first(); i < slots.size(); ++i) {
    const std::string* w = slots.word(i);
    if (w == nullptr || *w != option) continue;
    last = i;
    for (size_t j = i + 1; j < slots.size(); ++j) {
      const std::string* v = slots.word(j);
      if (v == nullptr) continue;
      if (key_of_pair(*v).empty()) break;
      last = j;
      if (key_of_pair(*v) == key) {
        slots.replace(j, key + "=" + value);
        found = true;
      }
    }
  }
  if (found) return;
  if (last) {
    slots.insert_after(*last, key + "=" + value);
  } else {
    slots.append_pair(option, key + "=" + value);
  }
}

}  // namespace

std::optional<ArgumentPlace> parse_argument_place(const std::string& text, std::string* why) {
  const auto refuse = [&](const std::string& what) -> std::optional<ArgumentPlace> {
    if (why != nullptr) *why = what;
    return std::nullopt;
  };
  ArgumentPlace p;
  std::string rest = text;
  if (rest.rfind("on:", 0) == 0 || rest.rfind("off:", 0) == 0) {
    p.kind = rest[1] == 'n' ? ArgumentPlace::Kind::kSwitchOn : ArgumentPlace::Kind::kSwitchOff;
    rest = rest.substr(rest.find(':') + 1);
  } else if (!rest.empty() && rest[0] == '@') {
    const size_t colon = rest.find(':');
    const std::string digits = rest.substr(1, colon == std::string::npos ? std::string::npos : colon - 1);
    if (digits.empty() || digits.size() > 6 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      return refuse(std::string("a word's index after @ (") + kPlaceForms + ")");
    }
    p.word = static_cast<size_t>(std::stoul(digits));
    p.kind = ArgumentPlace::Kind::kWord;
    if (colon != std::string::npos) {
      p.kind = ArgumentPlace::Kind::kFileKey;
      p.file_key = rest.substr(colon + 1);
      const bool plain_key = !p.file_key.empty() && p.file_key.front() != '.' && p.file_key.back() != '.' &&
                             std::none_of(p.file_key.begin(), p.file_key.end(), [](char c) {
                               return std::isspace(static_cast<unsigned char>(c)) ||
                                      std::iscntrl(static_cast<unsigned char>(c));
                             });
      if (!plain_key) return refuse(std::string("a dotted key of the file after @N: (") + kPlaceForms + ")");
    }
    return p;
  } else if (rest.empty() || rest[0] != '-') {
    return refuse(kPlaceForms);
  }
  p.option_strings = split(rest, '|');
  if (!std::all_of(p.option_strings.begin(), p.option_strings.end(), option_string)) {
    return refuse(std::string("option strings starting with '-', separated by '|', without '=' or spaces (") +
                  kPlaceForms + ")");
  }
  return p;
}

std::string to_string(const ArgumentPlace& place) {
  switch (place.kind) {
    case ArgumentPlace::Kind::kWord:
      return "@" + std::to_string(place.word);
    case ArgumentPlace::Kind::kFileKey:
      return "@" + std::to_string(place.word) + ":" + place.file_key;
    case ArgumentPlace::Kind::kSwitchOn:
    case ArgumentPlace::Kind::kSwitchOff:
    case ArgumentPlace::Kind::kOption: {
      std::string out = place.kind == ArgumentPlace::Kind::kSwitchOn    ? "on:"
                        : place.kind == ArgumentPlace::Kind::kSwitchOff ? "off:"
                                                                        : "";
      for (size_t i = 0; i < place.option_strings.size(); ++i) out += (i ? "|" : "") + place.option_strings[i];
      return out;
    }
  }
  return "";
}

size_t first_argument(const std::vector<std::string>& command) {
  for (size_t i = 0; i < command.size(); ++i) {
    if (ends_with(command[i], ".py")) return i + 1;
    if (i > 0 && command[i] == "-m" && i + 1 < command.size()) return i + 2;
  }
  return std::min<size_t>(1, command.size());
}

WorkerArgv compose_worker_argv(const WorkerConfig& worker, const std::vector<KeyArgument>& keys) {
  Slots slots(worker.command, first_argument(worker.command));
  std::vector<FileEdit> edits;
  for (const auto& k : keys) {
    ArgumentPlace place;
    if (const auto it = worker.written_as.find(k.key); it != worker.written_as.end()) {
      std::string why;
      const auto parsed = parse_argument_place(it->second, &why);
      if (!parsed) throw std::logic_error("worker.written_as." + k.key + ": expected " + why);
      place = *parsed;
    } else if (worker.syntax == CommandSyntax::kKeyValue) {
      set_key_value(slots, k.key, k.value);
      continue;
    } else if (worker.syntax == CommandSyntax::kOption) {
      set_option_pair(slots, worker.syntax_option, k.key, k.value);
      continue;
    } else if (worker.syntax == CommandSyntax::kFile) {
      const auto file = parse_argument_place(worker.syntax_option, nullptr);
      if (!file || file->kind != ArgumentPlace::Kind::kWord) {
        throw std::logic_error("worker.syntax_option: expected @N, got " + worker.syntax_option);
      }
      place.kind = ArgumentPlace::Kind::kFileKey;
      place.word = file->word;
      place.file_key = k.key;
    } else {
      place.option_strings = {"--" + k.key};
    }
    switch (place.kind) {
      case ArgumentPlace::Kind::kOption:
        set_option(slots, place.option_strings, k.value);
        break;
      case ArgumentPlace::Kind::kSwitchOn:
      case ArgumentPlace::Kind::kSwitchOff:
        set_switch(slots, place.option_strings,
                   truthy(k.value) == (place.kind == ArgumentPlace::Kind::kSwitchOn));
        break;
      case ArgumentPlace::Kind::kWord:
      case ArgumentPlace::Kind::kFileKey:
        if (place.word < slots.first() || place.word >= slots.size()) {
          throw std::logic_error("worker.written_as." + k.key + ": word " + std::to_string(place.word) +
                                 " is not an argument of the command");
        }
        if (place.kind == ArgumentPlace::Kind::kWord) {
          slots.replace(place.word, k.value);
        } else {
          edits.push_back({place.word, place.file_key, k.value});
        }
        break;
    }
  }
  return slots.finish(std::move(edits));
}

std::string describe_argument(const WorkerConfig& worker, const std::string& key, const std::string& value) {
  const auto it = worker.written_as.find(key);
  std::optional<ArgumentPlace> place;
  if (it != worker.written_as.end()) place = parse_argument_place(it->second, nullptr);
  if (!place) {
    switch (worker.syntax) {
      case CommandSyntax::kKeyValue: return key + "=" + value;
      case CommandSyntax::kOption: return worker.syntax_option + " " + key + "=" + value;
      case CommandSyntax::kFlags: return "--" + key + " " + value;
      case CommandSyntax::kFile: {
        const auto file = parse_argument_place(worker.syntax_option, nullptr);
        const bool word = file && file->word < worker.command.size();
        return key + ": " + value + " in a copy of " + (word ? worker.command[file->word] : worker.syntax_option);
      }
    }
  }
  const std::string first = place->option_strings.empty() ? "" : place->option_strings.front();
  switch (place->kind) {
    case ArgumentPlace::Kind::kOption: return first + " " + value;
    case ArgumentPlace::Kind::kSwitchOn: return truthy(value) ? first : "without " + first;
    case ArgumentPlace::Kind::kSwitchOff: return truthy(value) ? "without " + first : first;
    case ArgumentPlace::Kind::kWord: return value + " (the command's word " + std::to_string(place->word) + ")";
    case ArgumentPlace::Kind::kFileKey: {
      const std::string file = place->word < worker.command.size() ? worker.command[place->word] : "?";
      return place->file_key + ": " + value + " in a copy of " + file;
    }
  }
  return key + "=" + value;
}

std::vector<std::pair<std::string, size_t>> positional_words(const std::vector<std::string>& command,
                                                             const std::vector<ParserOption>& options) {
  std::vector<const ParserOption*> positionals;
  for (const auto& o : options) {
    if (o.kind == ParserOption::Kind::kPositional) positionals.push_back(&o);
  }
  std::vector<std::pair<std::string, size_t>> out;
  if (positionals.empty()) return out;
  size_t next = 0;
  for (size_t i = first_argument(command); i < command.size() && next < positionals.size(); ++i) {
    const std::string& w = command[i];
    if (w == "--") continue;
    if (w.size() > 1 && w[0] == '-' && !std::isdigit(static_cast<unsigned char>(w[1]))) {
      const std::string name = w.substr(0, w.find('='));
      const auto it = std::find_if(options.begin(), options.end(), [&](const ParserOption& o) {
        return std::find(o.strings.begin(), o.strings.end(), name) != o.strings.end();
      });
      if (it == options.end() || it->kind != ParserOption::Kind::kValue || w.find('=') != std::string::npos) continue;
      // Its value words.
      for (int n = 0; i + 1 < command.size() && (it->nargs < 0 || n < it->nargs); ++n) {
        if (it->nargs < 0 && command[i + 1].size() > 1 && command[i + 1][0] == '-') break;
        ++i;
      }
      continue;
    }
    out.emplace_back(positionals[next]->dest, i);
    // A positional of several words: only its first is a place.
    if (positionals[next]->nargs != 1) break;
    ++next;
  }
  return out;
}

std::string place_of(const ParserOption& option, const std::vector<std::string>& command,
                     const std::vector<ParserOption>& options) {
  ArgumentPlace place;
  place.option_strings = option.strings;
  switch (option.kind) {
    case ParserOption::Kind::kValue:
      if (option.strings.empty() || option.nargs != 1) return "";
      // The long spelling first: it is what dbh writes.
      std::stable_sort(place.option_strings.begin(), place.option_strings.end(),
                       [](const std::string& a, const std::string& b) {
                         return (a.rfind("--", 0) == 0) > (b.rfind("--", 0) == 0);
                       });
      return to_string(place);
    case ParserOption::Kind::kSwitchOn:
    case ParserOption::Kind::kSwitchOff:
      if (option.strings.empty()) return "";
      place.kind = option.kind == ParserOption::Kind::kSwitchOn ? ArgumentPlace::Kind::kSwitchOn
                                                                : ArgumentPlace::Kind::kSwitchOff;
      return to_string(place);
    case ParserOption::Kind::kPositional:
      for (const auto& [dest, word] : positional_words(command, options)) {
        if (dest == option.dest) return "@" + std::to_string(word);
      }
      return "";
  }
  return "";
}

DetectedSyntax detect_syntax(const std::vector<std::string>& command, bool has_parser) {
  DetectedSyntax d;
  bool pairs = false;
  for (size_t i = first_argument(command); i < command.size(); ++i) {
    const std::string& w = command[i];
    const bool option = w.size() > 1 && w[0] == '-' && !std::isdigit(static_cast<unsigned char>(w[1]));
    if (option && w.find('=') == std::string::npos && i + 1 < command.size() && !key_of_pair(command[i + 1]).empty()) {
      d.syntax = CommandSyntax::kOption;
      d.option = w;
      return d;
    }
    if (option && w.rfind("--", 0) == 0 && w.substr(0, w.find('=')).find('.') != std::string::npos) {
      d.dotted_flags = true;
    }
    if (!option && !key_of_pair(w).empty()) pairs = true;
  }
  if (d.dotted_flags || (has_parser && !pairs)) d.syntax = CommandSyntax::kFlags;
  return d;
}

std::vector<std::string> overrides_from_command_words(const WorkerConfig& worker,
                                                      const std::vector<std::string>& words, const std::string& where,
                                                      const std::vector<ParserOption>& options) {
  std::vector<std::string> out;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (!key_of_pair(w).empty()) {
      out.push_back(w);
      continue;
    }
    if (worker.syntax == CommandSyntax::kOption && w == worker.syntax_option) continue;
    const bool option = w.size() > 1 && w[0] == '-' && !std::isdigit(static_cast<unsigned char>(w[1]));
    if (!option) {
      throw UsageError(where + ": expected key=value or an option of your command (worker.syntax " +
                       to_string(worker.syntax) + "), got " + quoted_excerpt(w) +
                       " (a word that sets no key of your configuration)");
    }
    const size_t eq = w.find('=');
    const std::string name = w.substr(0, eq);
    const auto value = [&]() -> std::string {
      if (eq != std::string::npos) return w.substr(eq + 1);
      if (i + 1 >= words.size()) {
        throw UsageError(where + ": " + name + ": expected its value after it, got the end of the words");
      }
      return words[++i];
    };
    bool found = false;
    for (const auto& [key, text] : worker.written_as) {
      const auto place = parse_argument_place(text, nullptr);
      if (!place || std::find(place->option_strings.begin(), place->option_strings.end(), name) ==
                        place->option_strings.end()) {
        continue;
      }
      found = true;
      if (place->kind == ArgumentPlace::Kind::kOption) out.push_back(key + "=" + value());
      if (place->kind == ArgumentPlace::Kind::kSwitchOn) out.push_back(key + "=true");
      if (place->kind == ArgumentPlace::Kind::kSwitchOff) out.push_back(key + "=false");
      break;
    }
    if (found) continue;
    if (!options.empty() && std::none_of(options.begin(), options.end(), [&](const ParserOption& o) {
          return std::find(o.strings.begin(), o.strings.end(), name) != o.strings.end();
        })) {
      // Bad input, not a finding: a probe of a word the parser refuses fails
      // at startup whatever the key.
      std::string known;
      for (size_t k = 0; k < options.size() && k < 12; ++k) {
        if (!options[k].strings.empty()) known += (known.empty() ? "" : ", ") + options[k].strings.front();
      }
      throw UsageError(where + ": expected an option your command's parser takes (" + known +
                       (options.size() > 12 ? ", …" : "") + "), got " + quoted_excerpt(name));
    }
    if (worker.syntax == CommandSyntax::kFlags && name.rfind("--", 0) == 0 && name.size() > 2) {
      out.push_back(name.substr(2) + "=" + value());
      continue;
    }
    throw UsageError(where + ": expected key=value or an option of your command that sets a key (worker.written_as, "
                     "worker.syntax " + to_string(worker.syntax) + "), got " + quoted_excerpt(name));
  }
  return out;
}

std::string written_as_problem(const WorkerConfig& worker, const std::string& text) {
  std::string why;
  const auto place = parse_argument_place(text, &why);
  if (!place) return why;
  if (place->kind == ArgumentPlace::Kind::kWord || place->kind == ArgumentPlace::Kind::kFileKey) {
    const size_t first = first_argument(worker.command);
    if (place->word < first || place->word >= worker.command.size()) {
      return "a word of worker.command after the program (" + std::to_string(first) + " to " +
             std::to_string(worker.command.size() == 0 ? 0 : worker.command.size() - 1) + "), got word " +
             std::to_string(place->word);
    }
  }
  return "";
}

}  // namespace dbh::harness::scenario
