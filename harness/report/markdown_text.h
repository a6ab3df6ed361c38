#pragma once

#include <string>

namespace dbh::harness::report {

/// Text dbh composed around values it did not choose (a worker's message,
/// module or class, inside dbh's own evidence sentence) as one line of
/// Markdown: its `code spans` kept as written (a span is literal), every
/// other character that Markdown or HTML would read as markup (`\ * _ [ ] <
/// > | #`, a `(` after a `]`, and a backtick that opens no span) escaped, line breaks joined. No
/// value inside can start a heading, a link, an image, a tag or a table
/// cell.
std::string markdown_text(const std::string& s);

}  // namespace dbh::harness::report
