#include "harness/common/text.h"

#include <ctime>
#include <iomanip>
#include <sstream>

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

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@") ==
                        std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace dbh::harness
