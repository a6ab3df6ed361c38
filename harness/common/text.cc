#include "harness/common/text.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <iomanip>
#include <cstdint>
#include <sstream>
#include <string_view>

namespace dbh::harness {

namespace {
std::string format_now(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::ostringstream s;
  s << std::put_time(&tm, format);
  return s.str();
}
}  // namespace

std::string now_iso() { return format_now("%Y-%m-%dT%H:%M:%S%z"); }

std::string timestamp_compact() { return format_now("%Y%m%d-%H%M%S"); }

namespace {

// Decodes one UTF-8 sequence at s[i]; returns its length, or 0 when invalid.
size_t utf8_length(const std::string& s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  uint32_t v = 0;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    n = 2, v = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, v = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, v = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid.
  if ((n == 2 && v < 0x80) || (n == 3 && v < 0x800) || (n == 4 && v < 0x10000) || v > 0x10FFFF ||
      (v >= 0xD800 && v <= 0xDFFF)) {
    return 0;
  }
  *cp = v;
  return n;
}

template <typename F>
std::string map_code_points(const std::string& s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t n = utf8_length(s, i, &cp);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
      continue;
    }
    f(out, cp, s.substr(i, n));
    i += n;
  }
  return out;
}

// Characters no shell treats specially anywhere in a word.
constexpr std::string_view kShellPlain =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@";

bool shell_plain(const std::string& s) {
  return !s.empty() && s.find_first_not_of(kShellPlain) == std::string::npos;
}

std::string single_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A code point that would end or disturb a line of text: C0 and C1 controls,
// DEL, and the Unicode line and paragraph separators.
// What one line of text must not carry raw: control characters, line and
// paragraph separators, and bidirectional formatting characters, which
// reorder what a terminal or a page shows ("Trojan Source"), so a name would
// not read as it is.
bool breaks_line(uint32_t cp) {
  return cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0) || cp == 0x2028 || cp == 0x2029 || cp == 0x061C ||
         cp == 0x200E || cp == 0x200F || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string shell_quote(const std::string& s) {
  if (shell_plain(s)) return s;
  bool plain_text = true;  // valid UTF-8 without line-breaking characters
  for (size_t i = 0; i < s.size() && plain_text;) {
    uint32_t cp = 0;
    const size_t n = utf8_length(s, i, &cp);
    plain_text = n != 0 && !breaks_line(cp);
    i += n == 0 ? 1 : n;
  }
  if (plain_text) return single_quoted(s);
  // bash's ANSI-C quoting: one line, every byte spelled out. '!' too, so an
  // interactive shell's history expansion never touches it.
  static const char* kHex = "0123456789ABCDEF";
  const auto hex = [&](std::string& out, unsigned char b) {
    out += "\\x";
    out += kHex[b >> 4];
    out += kHex[b & 0xF];
  };
  std::string out = "$'";
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t n = utf8_length(s, i, &cp);
    if (n == 0) {
      hex(out, static_cast<unsigned char>(s[i]));
      ++i;
      continue;
    }
    switch (cp) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\\': out += "\\\\"; break;
      case '\'': out += "\\'"; break;
      case '!': hex(out, '!'); break;
      default:
        if (breaks_line(cp)) {
          for (size_t k = 0; k < n; ++k) hex(out, static_cast<unsigned char>(s[i + k]));
        } else {
          out.append(s, i, n);
        }
    }
    i += n;
  }
  return out + "'";
}

std::string shell_quote_posix(const std::string& s) { return shell_plain(s) ? s : single_quoted(s); }

std::string shell_command(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) out += (out.empty() ? "" : " ") + shell_quote(a);
  return out;
}

std::string safe_file_name(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    out += ok ? c : '_';
    if (out.size() >= 96) break;
  }
  if (out.empty() || out == "." || out == "..") out = "scenario" + out;
  return out;
}

std::string valid_utf8(const std::string& s) {
  return map_code_points(s, [](std::string& out, uint32_t, const std::string& bytes) { out += bytes; });
}

std::string one_line(const std::string& s) {
  return map_code_points(s, [](std::string& out, uint32_t cp, const std::string& bytes) {
    out += breaks_line(cp) ? " " : bytes;
  });
}

std::string last_line(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    const size_t begin = s.rfind('\n', end - 1);
    const size_t from = begin == std::string::npos ? 0 : begin + 1;
    const std::string line = s.substr(from, end - from);
    if (line.find_first_not_of(" \t\r") != std::string::npos) return truncate_utf8(one_line(line), 300);
    if (begin == std::string::npos) break;
    end = begin;
  }
  return "";
}

std::string truncate_utf8(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  const std::string ellipsis = "\xE2\x80\xA6";
  size_t cut = max > ellipsis.size() ? max - ellipsis.size() : 0;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + ellipsis;
}

std::string quoted_excerpt(const std::string& s) {
  constexpr size_t kMax = 80;
  const std::string text = one_line(s);
  if (text.size() <= kMax) return "\"" + text + "\"";
  return "\"" + truncate_utf8(text, kMax) + "\" (" + std::to_string(s.size()) + " bytes)";
}

std::string xml_escape(const std::string& s) {
  return map_code_points(s, [](std::string& out, uint32_t cp, const std::string& bytes) {
    switch (cp) {
      case '&': out += "&amp;"; return;
      case '<': out += "&lt;"; return;
      case '>': out += "&gt;"; return;
      case '"': out += "&quot;"; return;
      case '\'': out += "&apos;"; return;
      default: break;
    }
    const bool allowed = cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
                         (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
    out += allowed ? bytes : std::string("\xEF\xBF\xBD");
  });
}

std::string markdown_inline(const std::string& s) {
  std::string out;
  char previous = 0;
  for (char c : one_line(s)) {
    // A "(" after a "]" too: "\\](javascript:…)" reads as no link, but a
    // reader scanning for "](" should not find one either.
    if (std::string_view("|`*_[]<>#\\").find(c) != std::string_view::npos || (c == '(' && previous == ']')) {
      out += '\\';
    }
    out += c;
    previous = c;
  }
  return out;
}

std::string markdown_code(const std::string& s) {
  const std::string text = one_line(s);
  if (text.empty()) return "` `";
  size_t longest = 0;
  for (size_t i = 0; i < text.size();) {
    size_t n = 0;
    while (i + n < text.size() && text[i + n] == '`') ++n;
    longest = std::max(longest, n);
    i += n == 0 ? 1 : n;
  }
  const std::string fence(longest + 1, '`');
  // A space on each side keeps a leading or trailing backtick out of the
  // fence (CommonMark strips one such space from each side).
  const bool pad = !text.empty() && (text.front() == '`' || text.back() == '`');
  return fence + (pad ? " " : "") + text + (pad ? " " : "") + fence;
}

std::string terminal_text(const std::string& markdown) {
  std::string out = markdown;
  for (const std::string mark : {"**", "`"}) {
    for (size_t i; (i = out.find(mark)) != std::string::npos;) out.erase(i, mark.size());
  }
  return out;
}

std::string fixed(double v, int digits) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(digits) << v;
  return o.str();
}

std::string significant(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace dbh::harness
