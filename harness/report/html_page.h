#pragma once

#include <string>

namespace dbh::harness {

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

}  // namespace dbh::harness
