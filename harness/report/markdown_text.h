#pragma once

#include <string>

namespace dbh::harness::report {

/// Text dbh composed around values it did not choose (a worker's message,
/// module or class, inside dbh's own evidence sentence) as one line of
/// Markdown: its `code spans` and **emphasis** kept as written (a span is
/// literal; emphasis is harmless), every character that starts a link, an
/// image, a tag, a heading or a table cell (`\ [ ] < > | #`, a `(` after a
/// `]`) and a backtick that opens no span escaped, line breaks joined.
std::string markdown_text(const std::string& s);

}  // namespace dbh::harness::report
