#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace dbh::harness {

// Note [dbh's FNV offset basis]: every FNV-1a 64 in dbh has always started
// from 1469598103934665603, the standard offset basis (14695981039346656037)
// with its last digit dropped. Scenario hashes (reports, `hello` events),
// shard assignment and probe-cache keys are persisted and compared across
// runs, so dbh keeps that basis: "" hashes to 14650fb0739d0383, not to the
// standard cbf29ce484222325. The prime is the standard one.

/// The FNV-1a 64 prime.
inline constexpr uint64_t kFnv64Prime = 1099511628211ULL;
/// dbh's FNV-1a 64 offset basis (Note [dbh's FNV offset basis]).
inline constexpr uint64_t kFnv64OffsetBasis = 1469598103934665603ULL;

/// An incremental FNV-1a 64 hash of a byte sequence: the same bytes give the
/// same value however they are split across update() calls. Not
/// cryptographic; for ids, shard assignment and cache keys.
class Fnv1a64 {
 public:
  /// One byte.
  Fnv1a64& update(unsigned char byte) {
    h_ = (h_ ^ byte) * kFnv64Prime;
    return *this;
  }
  /// The bytes of `text`, in order (no length, no terminator).
  Fnv1a64& update(std::string_view text) { return update(text.data(), text.size()); }
  /// `n` bytes at `data`.
  Fnv1a64& update(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * kFnv64Prime;
    return *this;
  }
  /// The hash of everything fed so far.
  uint64_t value() const { return h_; }
  /// value() as 16 lowercase hex digits.
  std::string hex() const;

 private:
  uint64_t h_ = kFnv64OffsetBasis;
};

/// The FNV-1a 64 hash of `text` (Fnv1a64().update(text).value()).
inline uint64_t fnv1a64(std::string_view text) { return Fnv1a64().update(text).value(); }

/// `v` as 16 lowercase hex digits, zero-padded ("%016llx").
inline std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

inline std::string Fnv1a64::hex() const { return hex64(h_); }

// Two 64-bit lanes: FNV-1a 64 of the bytes, and an FNV-style lane with its
// own offset, each byte shifted by 0x5b and the state folded (>> 29) after
// every byte. A 128-bit digest, as 32 hex digits. Not cryptographic; a cache
// key, so both lanes must stay as they are.
/// A 128-bit digest of a sequence of fields: cache keys (probes, measured
/// choices).
class Digest {
 public:
  // A field, prefixed by its length: ("ab", "c") differs from ("a", "bc").
  Digest& add(const std::string& s) {
    uint64_t n = s.size();
    for (int i = 0; i < 8; ++i, n >>= 8) mix(static_cast<unsigned char>(n & 0xff));
    for (unsigned char c : s) mix(c);
    return *this;
  }
  Digest& add_bytes(const char* p, size_t n) {
    for (size_t i = 0; i < n; ++i) mix(static_cast<unsigned char>(p[i]));
    return *this;
  }
  std::string hex() const { return a_.hex() + hex64(b_); }

 private:
  void mix(unsigned char c) {
    a_.update(c);
    b_ = (b_ ^ static_cast<unsigned char>(c + 0x5b)) * kFnv64Prime;
    b_ ^= b_ >> 29;
  }
  Fnv1a64 a_;
  uint64_t b_ = 0x84222325cbf29ce4ULL;
};

}  // namespace dbh::harness
