#include "harness/report/markdown_html.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/common/text.h"
#include "harness/report/html_page.h"
#include "harness/version.h"

namespace dbh::harness::report {
namespace {

// Note [Self-contained pages] (html_page.h): the parser below works on the raw
// Markdown and emits only its own constant tags; every piece of input text
// reaches the page through esc(), text and attribute values alike.
std::string esc(const std::string& s) {
  return xml_escape(s);
}

constexpr size_t kNpos = std::string::npos;
// Bold and link text nest at most this deep; deeper markup stays text.
constexpr int kMaxInlineDepth = 4;
// A link's text and its target are each at most this long; a longer one is
// text. Bounds the searches for ']' and ')' on hostile input.
constexpr size_t kMaxLinkText = 1024;

bool is_punct(char c) {
  return std::string_view("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~").find(c) != std::string_view::npos;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == kNpos) return "";
  const size_t b = s.find_last_not_of(" \t");
  return s.substr(a, b - a + 1);
}

size_t indent_of(const std::string& l) {
  size_t n = 0;
  for (char c : l) {
    if (c == ' ') {
      ++n;
    } else if (c == '\t') {
      n += 4;
    } else {
      break;
    }
  }
  return n;
}

bool is_blank(const std::string& l) {
  return trim(l).empty();
}

// Every run of backticks in a text and where the code span it opens ends:
// the next run of the same length (CommonMark), found for all runs in one
// pass so that many unmatched backticks cost no more than a few.
class CodeSpans {
 public:
  explicit CodeSpans(const std::string& s) {
    std::vector<std::pair<size_t, size_t>> runs;  // position, length
    for (size_t i = 0; i < s.size();) {
      if (s[i] == '\\' && i + 1 < s.size() && is_punct(s[i + 1])) {
        i += 2;  // as inline_html reads it: an escaped backtick opens nothing
        continue;
      }
      if (s[i] != '`') {
        ++i;
        continue;
      }
      size_t n = 0;
      while (i + n < s.size() && s[i + n] == '`')
        ++n;
      runs.emplace_back(i, n);
      i += n;
    }
    std::map<size_t, size_t> next_end;  // run length -> end of the next such run
    for (size_t k = runs.size(); k-- > 0;) {
      const auto [pos, len] = runs[k];
      const auto it = next_end.find(len);
      spans_[pos] = {len, it == next_end.end() ? kNpos : it->second};
      next_end[len] = pos + len;
    }
  }

  /// Whether a run of backticks starts at `i`; its length in `*ticks` and
  /// the end of its code span (one past the closing run, kNpos if none) in
  /// `*end`.
  bool at(size_t i, size_t* ticks, size_t* end) const {
    const auto it = spans_.find(i);
    if (it == spans_.end()) return false;
    *ticks = it->second.first;
    *end = it->second.second;
    return true;
  }

 private:
  std::map<size_t, std::pair<size_t, size_t>> spans_;
};

// Where `close` first occurs in [from, limit) outside backslash escapes and
// code spans; kNpos if nowhere.
size_t find_outside_code(const std::string& s, const CodeSpans& spans, size_t from, size_t limit,
                         std::string_view close) {
  limit = std::min(limit, s.size());
  for (size_t i = from; i < limit;) {
    size_t ticks = 0, end = 0;
    if (s[i] == '\\' && i + 1 < s.size()) {
      i += 2;
    } else if (spans.at(i, &ticks, &end)) {
      i = end == kNpos ? i + ticks : end;
    } else if (s.compare(i, close.size(), close) == 0) {
      return i;
    } else {
      ++i;
    }
  }
  return kNpos;
}

// The ']' closing the '[' at `open`, counting nested brackets, within
// kMaxLinkText bytes.
size_t closing_bracket(const std::string& s, const CodeSpans& spans, size_t open) {
  int depth = 0;
  const size_t limit = std::min(s.size(), open + kMaxLinkText);
  for (size_t i = open; i < limit;) {
    size_t ticks = 0, end = 0;
    if (s[i] == '\\' && i + 1 < s.size()) {
      i += 2;
      continue;
    }
    if (spans.at(i, &ticks, &end)) {
      i = end == kNpos ? i + ticks : end;
      continue;
    }
    if (s[i] == '[') ++depth;
    if (s[i] == ']' && --depth == 0) return i;
    ++i;
  }
  return kNpos;
}

std::string unescape_punct(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && is_punct(s[i + 1])) ++i;
    out += s[i];
  }
  return out;
}

// A link target that names a file of this folder tree: no scheme, not
// absolute, not host-relative, no whitespace or control character.
bool local_target(const std::string& t) {
  if (t.empty() || std::string_view("/\\#?").find(t[0]) != std::string_view::npos) return false;
  for (unsigned char c : t) {
    if (c <= ' ' || c == 0x7F) return false;
  }
  const size_t colon = t.find(':');
  return colon == kNpos || colon > t.find_first_of("/?#");
}

// The images of the page being rendered, when it has a folder
// (markdown_page_html's third argument); set for the duration of one call.
thread_local ImageEmbedder* t_images = nullptr;

// Inline Markdown: backslash escapes, `code`, **bold**, [text](relative
// path), ![alt](relative image). Anything else, and any of these left
// unclosed, is text.
std::string inline_html(const std::string& s, int depth = 0) {
  const CodeSpans spans(s);
  bool no_more_bold = false;  // a failed search for "**" fails for every later one
  std::string out;
  std::string text;  // literal text not yet escaped
  auto flush = [&] {
    out += esc(text);
    text.clear();
  };
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == '\\' && i + 1 < s.size() && is_punct(s[i + 1])) {
      text += s[i + 1];
      i += 2;
      continue;
    }
    size_t ticks = 0, end = 0;
    if (spans.at(i, &ticks, &end)) {
      if (end == kNpos) {
        text.append(ticks, '`');
        i += ticks;
        continue;
      }
      std::string code = s.substr(i + ticks, end - i - 2 * ticks);
      for (char& ch : code) {
        if (ch == '\n') ch = ' ';
      }
      if (code.size() >= 2 && code.front() == ' ' && code.back() == ' ' && !trim(code).empty()) {
        code = code.substr(1, code.size() - 2);
      }
      flush();
      out += "<code>" + esc(code) + "</code>";
      i = end;
      continue;
    }
    if (c == '*' && i + 1 < s.size() && s[i + 1] == '*' && depth < kMaxInlineDepth && !no_more_bold) {
      const size_t close = find_outside_code(s, spans, i + 2, s.size(), "**");
      no_more_bold = close == kNpos;
      if (close != kNpos && close > i + 2) {
        flush();
        out += "<strong>" + inline_html(s.substr(i + 2, close - i - 2), depth + 1) + "</strong>";
        i = close + 2;
        continue;
      }
      text += "**";
      i += 2;
      continue;
    }
    // ![alt](relative.png): the image embedded when the page has a folder to
    // read it from (Note [Plots that tell the truth]), else a link to it.
    if (c == '!' && i + 1 < s.size() && s[i + 1] == '[' && depth < kMaxInlineDepth) {
      const size_t label_end = closing_bracket(s, spans, i + 1);
      if (label_end != kNpos && label_end + 1 < s.size() && s[label_end + 1] == '(') {
        const size_t target_end = s.find(')', label_end + 2);
        if (target_end != kNpos && target_end - label_end - 2 <= kMaxLinkText) {
          const std::string target = unescape_punct(trim(s.substr(label_end + 2, target_end - label_end - 2)));
          const std::string alt = unescape_punct(s.substr(i + 2, label_end - i - 2));
          if (local_target(target)) {
            flush();
            out += t_images != nullptr ? t_images->figure(target, alt, "plot")
                                       : "<a href=\"" + esc(html_url_path(target)) + "\">" + esc(alt) + "</a>";
            i = target_end + 1;
            continue;
          }
        }
      }
    }
    if (c == '[' && depth < kMaxInlineDepth) {
      const size_t label_end = closing_bracket(s, spans, i);
      if (label_end != kNpos && label_end + 1 < s.size() && s[label_end + 1] == '(') {
        size_t target_end = kNpos;
        for (size_t k = label_end + 2; k < std::min(s.size(), label_end + 2 + kMaxLinkText); ++k) {
          if (s[k] == ')') {
            target_end = k;
            break;
          }
        }
        if (target_end != kNpos) {
          const std::string target = unescape_punct(trim(s.substr(label_end + 2, target_end - label_end - 2)));
          if (local_target(target)) {
            flush();
            out += "<a href=\"" + esc(html_url_path(target)) + "\">" +
                   inline_html(s.substr(i + 1, label_end - i - 1), depth + 1) + "</a>";
          } else {
            text += s.substr(i, target_end + 1 - i);  // shown as written, never followed
          }
          i = target_end + 1;
          continue;
        }
      }
    }
    text += c;
    ++i;
  }
  flush();
  return out;
}

// --- Blocks ------------------------------------------------------------------

struct Fence {
  char ch;
  size_t len;
  size_t indent;
};

std::optional<Fence> fence_open(const std::string& l) {
  const size_t ind = indent_of(l);
  if (ind > 3) return std::nullopt;
  const std::string t = trim(l);
  if (t.empty() || (t[0] != '`' && t[0] != '~')) return std::nullopt;
  size_t n = 0;
  while (n < t.size() && t[n] == t[0])
    ++n;
  if (n < 3) return std::nullopt;
  // A backtick fence's info string holds no backtick (CommonMark).
  if (t[0] == '`' && t.find('`', n) != kNpos) return std::nullopt;
  return Fence{t[0], n, ind};
}

bool fence_close(const std::string& l, const Fence& f) {
  const std::string t = trim(l);
  if (indent_of(l) > 3 || t.size() < f.len) return false;
  return t.find_first_not_of(f.ch) == kNpos;
}

// Level 1-6 and the text of an ATX heading.
std::optional<std::pair<int, std::string>> heading(const std::string& l) {
  if (indent_of(l) > 3) return std::nullopt;
  const std::string t = trim(l);
  size_t n = 0;
  while (n < t.size() && t[n] == '#')
    ++n;
  if (n == 0 || n > 6 || (n < t.size() && t[n] != ' ' && t[n] != '\t')) return std::nullopt;
  std::string text = trim(t.substr(n));
  // An optional closing run of '#' preceded by a space.
  const size_t last = text.find_last_not_of('#');
  if (last == kNpos) {
    text.clear();
  } else if (last + 1 < text.size() && (text[last] == ' ' || text[last] == '\t')) {
    text = trim(text.substr(0, last));
  }
  return std::make_pair(static_cast<int>(n), text);
}

bool thematic_break(const std::string& l) {
  if (indent_of(l) > 3) return false;
  const std::string t = trim(l);
  if (t.empty() || (t[0] != '-' && t[0] != '*' && t[0] != '_')) return false;
  size_t n = 0;
  for (char c : t) {
    if (c == t[0]) {
      ++n;
    } else if (c != ' ' && c != '\t') {
      return false;
    }
  }
  return n >= 3;
}

struct ListItem {
  size_t indent;
  bool ordered;
  long start;
  std::string text;
};

std::optional<ListItem> list_item(const std::string& l) {
  const size_t ind = indent_of(l);
  const size_t a = l.find_first_not_of(" \t");
  if (a == kNpos) return std::nullopt;
  const std::string rest = l.substr(a);
  if ((rest[0] == '-' || rest[0] == '*' || rest[0] == '+') && (rest.size() == 1 || rest[1] == ' ' || rest[1] == '\t')) {
    return ListItem{ind, false, 1, rest.size() == 1 ? "" : trim(rest.substr(2))};
  }
  size_t d = 0;
  while (d < rest.size() && d < 9 && rest[d] >= '0' && rest[d] <= '9')
    ++d;
  if (d == 0 || d >= rest.size() || (rest[d] != '.' && rest[d] != ')')) return std::nullopt;
  if (d + 1 < rest.size() && rest[d + 1] != ' ' && rest[d + 1] != '\t') return std::nullopt;
  return ListItem{ind, true, std::stol(rest.substr(0, d)), d + 1 < rest.size() ? trim(rest.substr(d + 2)) : ""};
}

// The cells of a table row: split at '|' not escaped by a backslash, the
// outer pipes dropped, `\|` kept as a literal '|'.
std::vector<std::string> split_cells(const std::string& line) {
  std::string t = trim(line);
  if (!t.empty() && t[0] == '|') t.erase(0, 1);
  std::vector<std::string> cells;
  std::string cell;
  bool trailing_pipe = false;
  for (size_t i = 0; i < t.size(); ++i) {
    trailing_pipe = false;
    if (t[i] == '\\' && i + 1 < t.size()) {
      if (t[i + 1] == '|') {
        cell += '|';  // text, also inside a code span (as GitHub renders it)
      } else {
        cell += t.substr(i, 2);
      }
      ++i;
    } else if (t[i] == '|') {
      cells.push_back(trim(cell));
      cell.clear();
      trailing_pipe = true;
    } else {
      cell += t[i];
    }
  }
  if (!trailing_pipe || !trim(cell).empty()) cells.push_back(trim(cell));
  return cells;
}

bool table_separator(const std::string& l) {
  const std::string t = trim(l);
  if (t.find('-') == kNpos || t.find('|') == kNpos) return false;
  return t.find_first_not_of("|-: \t") == kNpos;
}

bool table_start(const std::vector<std::string>& lines, size_t i) {
  return i + 1 < lines.size() && lines[i].find('|') != kNpos && table_separator(lines[i + 1]);
}

bool starts_block(const std::vector<std::string>& lines, size_t i) {
  const std::string& l = lines[i];
  return is_blank(l) || fence_open(l) || heading(l) || thematic_break(l) || list_item(l) || table_start(lines, i);
}

class Renderer {
 public:
  explicit Renderer(std::vector<std::string> lines) : lines_(std::move(lines)) {}

  std::string render() {
    size_t i = front_matter_end();
    while (i < lines_.size()) {
      const std::string& l = lines_[i];
      if (is_blank(l)) {
        ++i;
      } else if (const auto f = fence_open(l)) {
        i = code_block(i, *f);
      } else if (const auto h = heading(l)) {
        const std::string tag = "h" + std::to_string(h->first);
        out_ += "<" + tag + ">" + inline_html(h->second) + "</" + tag + ">\n";
        ++i;
      } else if (thematic_break(l)) {
        out_ += "<hr>\n";
        ++i;
      } else if (table_start(lines_, i)) {
        i = table(i);
      } else if (list_item(l)) {
        i = list(i);
      } else {
        i = paragraph(i);
      }
    }
    return out_;
  }

 private:
  // YAML front matter (qualification.md has one): metadata, not shown.
  size_t front_matter_end() const {
    if (lines_.empty() || trim(lines_[0]) != "---") return 0;
    for (size_t j = 1; j < lines_.size(); ++j) {
      const std::string t = trim(lines_[j]);
      if (t == "---" || t == "...") return j + 1;
    }
    return 0;  // no closing line: not front matter
  }

  size_t code_block(size_t i, const Fence& f) {
    std::string code;
    size_t j = i + 1;
    for (; j < lines_.size() && !fence_close(lines_[j], f); ++j) {
      const std::string& l = lines_[j];
      size_t drop = 0;
      while (drop < f.indent && drop < l.size() && l[drop] == ' ')
        ++drop;
      code += l.substr(drop) + "\n";
    }
    out_ += "<pre><code>" + esc(code) + "</code></pre>\n";
    return j < lines_.size() ? j + 1 : j;  // an unterminated fence runs to the end
  }

  size_t table(size_t i) {
    const auto header = split_cells(lines_[i]);
    const size_t columns = std::max<size_t>(header.size(), 1);
    auto row = [&](std::vector<std::string> cells, const char* tag) {
      if (cells.size() > columns) {
        // No text is dropped: the extra cells join the last column.
        for (size_t k = columns; k < cells.size(); ++k)
          cells[columns - 1] += " | " + cells[k];
        cells.resize(columns);
      }
      cells.resize(columns);
      out_ += "<tr>";
      for (const auto& c : cells)
        out_ += std::string("<") + tag + ">" + inline_html(c) + "</" + tag + ">";
      out_ += "</tr>\n";
    };
    out_ += "<table>\n<thead>\n";
    row(header, "th");
    out_ += "</thead>\n<tbody>\n";
    size_t j = i + 2;
    for (; j < lines_.size(); ++j) {
      const std::string t = trim(lines_[j]);
      if (t.empty() || t[0] != '|') break;
      row(split_cells(t), "td");
    }
    out_ += "</tbody>\n</table>\n";
    return j;
  }

  // Note [Nested lists]: a stack of open lists by indentation. An item
  // indented deeper than the innermost list opens a list inside its last
  // item; one indented less closes lists until one is as shallow. Indented
  // lines that are not items continue the current item; a blank line or any
  // other line ends the lists.
  size_t list(size_t i) {
    struct Open {
      size_t indent;
      bool ordered;
    };
    std::vector<Open> open;
    std::string pending;  // the current item's text, not yet rendered
    auto flush = [&] {
      out_ += inline_html(pending);
      pending.clear();
    };
    auto close = [&] {
      out_ += open.back().ordered ? "</li>\n</ol>\n" : "</li>\n</ul>\n";
      open.pop_back();
    };
    size_t j = i;
    for (; j < lines_.size(); ++j) {
      const std::string& l = lines_[j];
      if (is_blank(l)) break;
      const auto item = list_item(l);
      if (!item) {
        if (indent_of(l) == 0 || fence_open(l) || heading(l)) break;
        pending += "\n" + trim(l);
        continue;
      }
      flush();
      while (!open.empty() && item->indent < open.back().indent)
        close();
      if (!open.empty() && item->indent == open.back().indent && item->ordered != open.back().ordered) close();
      if (open.empty() || item->indent > open.back().indent) {
        if (!open.empty()) out_ += "\n";
        if (item->ordered) {
          out_ += item->start == 1 ? "<ol>\n<li>" : "<ol start=\"" + std::to_string(item->start) + "\">\n<li>";
        } else {
          out_ += "<ul>\n<li>";
        }
        open.push_back({item->indent, item->ordered});
      } else {
        out_ += "</li>\n<li>";
      }
      pending = item->text;
    }
    flush();
    while (!open.empty())
      close();
    return j;
  }

  size_t paragraph(size_t i) {
    std::string text = trim(lines_[i]);
    size_t j = i + 1;
    for (; j < lines_.size() && !starts_block(lines_, j); ++j)
      text += "\n" + trim(lines_[j]);
    out_ += "<p>" + inline_html(text) + "</p>\n";
    return j;
  }

  std::vector<std::string> lines_;
  std::string out_;
};

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  size_t a = 0;
  while (a < s.size()) {
    size_t b = s.find('\n', a);
    if (b == kNpos) b = s.size();
    std::string l = s.substr(a, b - a);
    if (!l.empty() && l.back() == '\r') l.pop_back();
    lines.push_back(std::move(l));
    a = b + 1;
  }
  return lines;
}

}  // namespace

std::string markdown_page_html(const std::string& title, const std::string& markdown, const std::string& folder) {
  ImageEmbedder images(folder);
  struct Scope {
    explicit Scope(ImageEmbedder* e) { t_images = e; }
    ~Scope() { t_images = nullptr; }
  } scope(folder.empty() ? nullptr : &images);
  return valid_utf8(html_page_head(title) + Renderer(split_lines(markdown)).render() +
                    "<hr><p class=\"sub\">Written by dbh " + esc(kVersion) +
                    " from the Markdown file of the same name beside this page.</p>\n</body>\n</html>\n");
}

std::string front_matter_string(const std::string& value) {
  std::string out;
  for (const char c : nlohmann::json(one_line(value)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)) {
    out += c == '<' ? "\\u003c" : c == '>' ? "\\u003e" : std::string(1, c);
  }
  return out;
}

}  // namespace dbh::harness::report
