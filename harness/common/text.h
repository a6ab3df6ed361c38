#pragma once

#include <string>
#include <vector>

namespace dbh::harness {

/// Local time as ISO 8601 ("2026-11-21T08:30:00+0000").
std::string now_iso();
/// Local time for folder names ("20261121-083000").
std::string timestamp_compact();
/// `s` as one shell word on one line that bash (and zsh, ksh) reads back as
/// exactly `s`: as is when it holds only characters no shell treats
/// specially, in POSIX single quotes when it is printable, and in bash's
/// `$'…'` form when it holds a control character, a line or paragraph
/// separator or bytes that are not UTF-8 (`\n`, `\t`, `\r`, `\\`, `\'`,
/// others as `\xHH`). Never spans lines and never holds a control character,
/// so a command built from it can be printed, put in a Markdown code span or a
/// CI log without breaking out of its line. For every command dbh prints.
std::string shell_quote(const std::string& s);
/// `s` as one word for a POSIX shell (dash included): as is or in single
/// quotes, which keep every byte, line breaks included, so the word may span
/// lines. Only for scripts dbh writes and reads with a POSIX shell
/// (`repro.sh`) and for text dbh re-splits itself; never print it.
std::string shell_quote_posix(const std::string& s);
/// `args` as one line of shell words, each shell_quote'd: "dbh run 's x.yaml'".
std::string shell_command(const std::vector<std::string>& args);

/// `s` as one portable file name: characters other than letters, digits,
/// '.', '_' and '-' become '_', at most 96 bytes, never empty, "." or "..".
std::string safe_file_name(const std::string& s);
/// `s` with every invalid UTF-8 sequence replaced by U+FFFD.
std::string valid_utf8(const std::string& s);
/// `s` as one line of valid UTF-8: control characters (newlines included)
/// and bidirectional formatting characters become spaces. For names in
/// comments, headings and progress lines.
std::string one_line(const std::string& s);
/// `v` with `digits` decimals ("0.250"), as every report and message
/// writes a number.
std::string fixed(double v, int digits = 3);
/// `v` with 4 significant digits, in exponent form when large or small
/// ("41.08", "3.52e+14"): for numbers whose magnitude is the point.
std::string significant(double v);
/// The last line of `s` holding something other than white space, as
/// one_line() gives it, at most 300 bytes; empty when there is none.
std::string last_line(const std::string& s);

/// A line of dbh's Markdown (a summary, a measured-choices line) for the
/// terminal: without its `**` and backtick marks.
std::string terminal_text(const std::string& markdown);
/// The longest prefix of `s` of at most `max` bytes that ends on a code point
/// boundary, with "…" when anything was cut.
std::string truncate_utf8(const std::string& s, size_t max);
/// User text echoed in an error message: quoted, one line, and at most about
/// 80 bytes; a longer text is cut and its length said ("…" (102400 bytes)),
/// so a pasted file or a runaway value never floods a terminal or a log.
std::string quoted_excerpt(const std::string& s);
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
