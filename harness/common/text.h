#pragma once

#include <string>

namespace dbh::harness {

/// Local time as ISO 8601 ("2026-11-21T08:30:00+0000").
std::string now_iso();
/// Local time for folder names ("20261121-083000").
std::string timestamp_compact();
/// `s` quoted for a POSIX shell when it needs quoting.
std::string shell_quote(const std::string& s);

/// `s` as one portable file name: characters other than letters, digits,
/// '.', '_' and '-' become '_', at most 96 bytes, never empty, "." or "..".
std::string safe_file_name(const std::string& s);
/// `s` with every invalid UTF-8 sequence replaced by U+FFFD.
std::string valid_utf8(const std::string& s);
/// `s` as one line of valid UTF-8: control characters (newlines included)
/// become spaces. For names in comments, headings and progress lines.
std::string one_line(const std::string& s);
/// `s` escaped for XML 1.0 text and attribute values: valid UTF-8, markup
/// characters as entities, characters XML cannot carry replaced.
std::string xml_escape(const std::string& s);
/// `s` as inline Markdown text: one line, with the characters that start
/// markup (`|`, `` ` ``, `*`, `_`, `[`, `]`, `<`, `>`, `#`) backslash-escaped.
std::string markdown_inline(const std::string& s);
/// `s` as a Markdown code span: one line, verbatim (a code span shows
/// backslashes literally), fenced by one more backtick than the longest run
/// of backticks in it. Not for table cells, where `|` ends the cell.
std::string markdown_code(const std::string& s);

}  // namespace dbh::harness
