#pragma once

#include <string>

namespace dbh::harness::report {

/// `markdown` as one self-contained HTML page titled `title`, with
/// report.html's style and safety (Note [Self-contained pages] in
/// html_page.h): for bisect.html, diagnosis.html and qualification.html
/// beside the Markdown they render.
///
/// Renders the subset of Markdown dbh writes: ATX headings (`#` to `######`),
/// paragraphs, pipe tables (a header row and a `|---|` separator; missing
/// cells are left empty, extra cells join the last one so no text is lost),
/// numbered and bulleted lists nested by indentation (`   - ` under `1. `),
/// fenced code blocks (an unterminated fence runs to the end), `---` rules,
/// and inline `code`, **bold**, backslash escapes, `[text](path)` links and
/// `![alt](path)` images: embedded as data: URIs (ImageEmbedder) when
/// `folder`, the folder the page is written to, is given, else linked.
/// A link becomes `<a>` only when its target is a relative path (no scheme,
/// not absolute, no whitespace); any other target (`javascript:`, `https:`,
/// `//host`, `/etc/passwd`) stays visible as text. A leading YAML front
/// matter block (`---` … `---`) is metadata and is not shown. Anything else
/// is text: every byte of input is escaped before it reaches the page, so no
/// input can open a tag, an attribute or an entity.
std::string markdown_page_html(const std::string& title, const std::string& markdown,
                               const std::string& folder = "");

/// `value` as a YAML front-matter string: one line of valid UTF-8, a JSON
/// (hence YAML) double-quoted string with `<` and `>` as \u escapes, so a
/// renderer that shows front matter as text never meets markup in it.
std::string front_matter_string(const std::string& value);

}  // namespace dbh::harness::report
