#include "harness/report/markdown_text.h"

#include <string_view>

#include "harness/common/text.h"

namespace dbh::harness::report {

std::string markdown_text(const std::string& s) {
  const std::string text = one_line(s);
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '`') {
      size_t n = 0;
      while (i + n < text.size() && text[i + n] == '`') ++n;
      // The span ends at the next run of exactly n backticks.
      size_t end = std::string::npos;
      for (size_t j = i + n; j < text.size();) {
        size_t m = 0;
        while (j + m < text.size() && text[j + m] == '`') ++m;
        if (m == n) {
          end = j;
          break;
        }
        j += m == 0 ? 1 : m;
      }
      if (end == std::string::npos) {
        for (size_t k = 0; k < n; ++k) out += "\\`";
      } else {
        out.append(text, i, end + n - i);
        i = end;
      }
      i += n;
      continue;
    }
    // A "(" after a "]" too, as markdown_inline escapes it.
    if (std::string_view("\\[]<>|#").find(text[i]) != std::string_view::npos ||
        (text[i] == '(' && i > 0 && text[i - 1] == ']')) {
      out += '\\';
    }
    out += text[i++];
  }
  return out;
}

}  // namespace dbh::harness::report
