#pragma once
// Note [Reading JSON that may lie]: a field of JSON dbh did not just build
// itself (a worker's event, a file of an earlier run, a cache entry) may be
// missing, null or of another type. nlohmann's `j.value(key, fallback)`
// throws for a field of another type and for a `j` that is not an object, so
// one `"method": 7` in a worker's event would end the harness with an
// internal error. Every read of such a field goes through field_or, which
// returns the fallback instead (a number of either kind reads as a number);
// layers_test refuses `.value(` in the harness.

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace dbh::harness {

/// `j[key]` as a T, or nullopt when `j` is not an object, has no `key`,
/// holds null there, or holds another type (for an integer T: a number
/// outside T's range, or not finite; a conversion that would be undefined
/// behaviour is never made).
template <typename T, typename Json>
std::optional<T> optional_field(const Json& j, const std::string& key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!it->is_number()) return std::nullopt;
    if (it->is_number_float()) {
      const double v = it->template get<double>();
      if (!std::isfinite(v) || v < static_cast<double>(std::numeric_limits<T>::min()) ||
          v >= static_cast<double>(std::numeric_limits<T>::max())) {
        return std::nullopt;
      }
      return static_cast<T>(v);
    }
    if (it->is_number_unsigned() && it->template get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return std::nullopt;
    }
    if (it->is_number_integer() && !it->is_number_unsigned()) {
      const int64_t v = it->template get<int64_t>();
      if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          (v > 0 && static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
        return std::nullopt;
      }
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!it->is_number()) return std::nullopt;
  }
  try {
    return it->template get<T>();
  } catch (const nlohmann::detail::exception&) {
    return std::nullopt;
  }
}

/// `j[key]` as a T, or `fallback` where optional_field has none.
template <typename Json, typename T>
T field_or(const Json& j, const std::string& key, T fallback) {
  return optional_field<T>(j, key).value_or(std::move(fallback));
}

/// Note [An unknown is no zero]: a count a worker reports (bytes, files,
/// threads) that is absent, null, of another type, not finite, negative or
/// above `max` is unknown, never 0 nor a wrapped-around giant: no judgement
/// is made from it (a leak across runs is judged only over known figures),
/// and a report shows it as unknown.
template <typename Json>
std::optional<int64_t> count_field(const Json& j, const std::string& key, int64_t max = int64_t{1} << 52) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  if (it->is_number_float()) {
    const double v = it->template get<double>();
    if (!std::isfinite(v) || v < 0 || v > static_cast<double>(max) || v != std::floor(v)) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  if (it->is_number_unsigned()) {
    const uint64_t v = it->template get<uint64_t>();
    if (v > static_cast<uint64_t>(max)) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  const int64_t v = it->template get<int64_t>();
  if (v < 0 || v > max) return std::nullopt;
  return v;
}

/// The same for a string field with a literal fallback.
template <typename Json>
std::string field_or(const Json& j, const std::string& key, const char* fallback) {
  return field_or<Json, std::string>(j, key, std::string(fallback));
}

}  // namespace dbh::harness
