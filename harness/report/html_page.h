#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace dbh::harness::report {

/// Note [Self-contained pages]: every HTML page dbh writes (report.html, a
/// suite's index.html, bisect.html, diagnosis.html, qualification.html) opens
/// with html_page_head(): inline CSS, no script, and a Content-Security-Policy
/// that forbids scripts and every resource but inline styles and data: images.
/// Every string from a scenario, a message or a path reaches the page through
/// xml_escape() (text and attribute values alike: both quotes are escaped,
/// invalid UTF-8 and characters HTML cannot carry are replaced), and links go
/// only to files of the page's own folder tree, through html_url_path().

/// The page's opening up to and including `<body>`: doctype, charset, the CSP
/// meta, `title` (escaped) and the shared style sheet.
std::string html_page_head(const std::string& title);

/// `rel`, a relative path, for an href: every byte but unreserved characters
/// and '/' as %XX, so a file name never ends the attribute, starts a fragment
/// or a query, or names a scheme; prefixed with "./" unless it starts with
/// "../". Escape the result with xml_escape() like any attribute value.
std::string html_url_path(const std::string& rel);

/// Limits of what a page embeds, so a long run or a large overlay keeps the
/// page small enough to open.
inline constexpr size_t kHtmlMaxImageBytes = 2 * 1024 * 1024;      // per image; larger ones are linked
inline constexpr size_t kHtmlMaxEmbeddedBytes = 16 * 1024 * 1024;  // all images of one page

/// `in` in base64 (RFC 4648, padded).
std::string base64(const std::string& in);

/// The whole file when it is a regular file of at most `max` bytes (its size
/// in `*size` either way it exists), else nullopt.
std::optional<std::string> read_small_file(const std::string& path, size_t max, uintmax_t* size);

/// Embeds a page's images as data: URIs within its budget; a missing,
/// oversized or unrecognised file becomes a note with a relative link
/// instead. The page stays self-contained (Note [Self-contained pages]).
class ImageEmbedder {
 public:
  explicit ImageEmbedder(std::string root) : root_(std::move(root)) {}

  /// A `<figure>` of the PNG or JPEG at `rel` (relative to the page's
  /// folder) with `caption`, or the note saying why it is not embedded.
  std::string figure(const std::string& rel, const std::string& caption, const std::string& img_class);

 private:
  std::string root_;
  size_t used_ = 0;
};

}  // namespace dbh::harness::report
