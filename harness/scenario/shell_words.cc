#include "harness/scenario/from_command.h"

#include <string>
#include <vector>

#include "harness/common/error.h"

// A command line split into words as a POSIX shell splits one simple command,
// so that `dbh scenario from-command` reads the words the training gets.
namespace dbh::harness::scenario {
namespace {

constexpr const char* kWhere = "scenario from-command: ";
constexpr size_t kMaxCommandBytes = 1u << 20;

std::string at(const std::string& text, size_t offset) {
  int line = 1, column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

}  // namespace

std::vector<ShellWord> split_shell_words(const std::string& s) {
  if (s.size() > kMaxCommandBytes) {
    throw UsageError(std::string(kWhere) + "expected a command of at most 1 MiB, got " + std::to_string(s.size()) +
                     " bytes");
  }
  std::vector<ShellWord> words;
  std::string cur;
  bool in_word = false;
  size_t start = 0;
  auto begin_word = [&](size_t i) {
    if (!in_word) start = i;
    in_word = true;
  };
  auto end_word = [&] {
    if (!in_word) return;
    int line = 1, column = 1;
    for (size_t k = 0; k < start; ++k) {
      if (s[k] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    words.push_back({cur, line, column});
    cur.clear();
    in_word = false;
  };
  auto expansion = [&](size_t i) {
    throw UsageError(std::string(kWhere) + "expected literal words, got the shell expansion '" + s[i] + "' at " +
                     at(s, i) + " (expand it first: a scenario holds values, not shell code)");
  };
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\\') {
      if (i + 1 < s.size() && s[i + 1] == '\n') {  // line continuation
        i += 2;
      } else if (i + 2 < s.size() && s[i + 1] == '\r' && s[i + 2] == '\n') {
        i += 3;
      } else if (i + 1 == s.size()) {
        throw UsageError(std::string(kWhere) + "expected a character after the backslash at " + at(s, i) +
                         ", got the end of the command");
      } else {
        begin_word(i);
        cur += s[i + 1];
        i += 2;
      }
    } else if (c == '\'') {
      const size_t close = s.find('\'', i + 1);
      if (close == std::string::npos) {
        throw UsageError(std::string(kWhere) + "unbalanced quote: expected a closing ' for the quote opened at " +
                         at(s, i) + ", got the end of the command");
      }
      begin_word(i);
      cur += s.substr(i + 1, close - i - 1);
      i = close + 1;
    } else if (c == '"') {
      begin_word(i);
      size_t j = i + 1;
      for (;; ++j) {
        if (j >= s.size()) {
          throw UsageError(std::string(kWhere) + "unbalanced quote: expected a closing \" for the quote opened at " +
                           at(s, i) + ", got the end of the command");
        }
        if (s[j] == '"') break;
        if (s[j] == '$' || s[j] == '`') expansion(j);
        if (s[j] == '\\' && j + 1 < s.size() && std::string("$`\"\\\n").find(s[j + 1]) != std::string::npos) {
          if (s[j + 1] != '\n') cur += s[j + 1];
          ++j;
          continue;
        }
        cur += s[j];
      }
      i = j + 1;
    } else if (c == '#' && !in_word) {  // a comment runs to the end of its line
      while (i < s.size() && s[i] != '\n')
        ++i;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      end_word();
      ++i;
    } else if (std::string("|&;<>()").find(c) != std::string::npos) {
      throw UsageError(std::string(kWhere) + "expected one command, got the shell operator '" + c + "' at " + at(s, i));
    } else if (c == '$' || c == '`') {
      expansion(i);
    } else {
      begin_word(i);
      cur += c;
      ++i;
    }
  }
  end_word();
  return words;
}

}  // namespace dbh::harness::scenario
