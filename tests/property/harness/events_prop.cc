// Properties of the event codec: framing survives any content, and a stream
// cut anywhere (a worker dying mid-write) decodes to a prefix plus a torn tail.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "harness/proto/events.h"

namespace dbh::harness {
namespace {

using nlohmann::json;

// Appends code point `cp` as UTF-8.
void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// A valid UTF-8 string, control characters (newlines, NUL) included.
std::string Utf8String(size_t max_len = 12) {
  const auto n = *rc::gen::inRange<size_t>(0, max_len + 1);
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t cp = *rc::gen::oneOf(rc::gen::inRange<uint32_t>(0, 0x80),
                                        rc::gen::elementOf(std::vector<uint32_t>{'\n', '\r', 0, '"', '\\', 0x7F}),
                                        rc::gen::inRange<uint32_t>(0x80, 0xD800),
                                        rc::gen::inRange<uint32_t>(0xE000, 0x110000));
    append_utf8(s, cp);
  }
  return s;
}

// Any JSON value (finite numbers: JSON has no NaN), nested up to `depth`.
json AnyJson(int depth) {
  const int kind = *rc::gen::inRange(0, depth > 0 ? 9 : 7);
  switch (kind) {
    case 0: return nullptr;
    case 1: return *rc::gen::arbitrary<bool>();
    case 2: return *rc::gen::arbitrary<int64_t>();
    case 3: return *rc::gen::arbitrary<uint64_t>();
    case 4: return *rc::gen::suchThat(rc::gen::arbitrary<double>(), [](double d) { return std::isfinite(d); });
    case 5: return *rc::gen::inRange<int>(-3, 4);
    case 6: return Utf8String();
    case 7: {
      json a = json::array();
      const auto n = *rc::gen::inRange(0, 4);
      for (int i = 0; i < n; ++i) a.push_back(AnyJson(depth - 1));
      return a;
    }
    default: {
      json o = json::object();
      const auto n = *rc::gen::inRange(0, 4);
      for (int i = 0; i < n; ++i) o[Utf8String(6)] = AnyJson(depth - 1);
      return o;
    }
  }
}

RC_GTEST_PROP(EventCodecProp, AnyObjectWithAStringTypeRoundTrips, ()) {
  const std::string type = *rc::gen::suchThat(rc::gen::exec([] { return Utf8String(10); }),
                                               [](const std::string& s) { return !s.empty(); });
  json fields = json::object();
  const auto n = *rc::gen::inRange(0, 6);
  for (int i = 0; i < n; ++i) {
    const std::string key = *rc::gen::oneOf(rc::gen::just(std::string("type")), rc::gen::just(std::string("t")),
                                            rc::gen::exec([] { return Utf8String(8); }));
    fields[key] = AnyJson(2);
  }
  const double t = *rc::gen::suchThat(rc::gen::arbitrary<double>(), [](double d) { return std::isfinite(d); });

  const std::string line = proto::encode_event(type, fields, t);
  RC_ASSERT(!line.empty());
  RC_ASSERT(line.back() == '\n');
  RC_ASSERT(line.find('\n') == line.size() - 1);

  const proto::DecodedStream s = proto::decode_stream(line, "events.jsonl");
  RC_ASSERT(s.bad_lines.empty());
  RC_ASSERT(s.torn_tail.empty());
  RC_ASSERT(s.events.size() == 1u);
  const proto::Event& e = s.events[0];
  RC_ASSERT(e.type == type);
  RC_ASSERT(e.t == t);
  json expected = fields;
  expected["type"] = type;
  expected["t"] = t;
  RC_ASSERT(e.body == expected);
}

RC_GTEST_PROP(EventCodecProp, StreamCutAnywhereDecodesToAPrefixAndATornTail, ()) {
  // Messages are arbitrary bytes (invalid UTF-8 included): the encoder must
  // keep each event on one line whatever they hold.
  const auto count = *rc::gen::inRange(0, 8);
  std::string text;
  std::vector<size_t> line_ends;  // offset just past each '\n'
  std::vector<json> bodies;
  for (int i = 0; i < count; ++i) {
    // Every declared type, and one that is not (the codec carries any).
    std::vector<std::string> types(proto::event::kAll.begin(), proto::event::kAll.end());
    types.push_back("x\n\xff");
    const std::string type = *rc::gen::elementOf(types);
    const std::string message = *rc::gen::arbitrary<std::string>();
    const std::string line =
        proto::encode_event(type, {{"message", message}, {"step", i}, {"detail", AnyJson(1)}}, 0.25 * i);
    text += line;
    line_ends.push_back(text.size());
    bodies.push_back(json::parse(line));
  }
  const auto cut = *rc::gen::inRange<size_t>(0, text.size() + 1);
  const proto::DecodedStream s = proto::decode_stream(text.substr(0, cut), "events.jsonl");

  RC_ASSERT(s.bad_lines.empty());
  size_t complete = 0;
  while (complete < line_ends.size() && line_ends[complete] <= cut) ++complete;
  RC_ASSERT(s.events.size() == complete);
  for (size_t i = 0; i < complete; ++i) RC_ASSERT(s.events[i].body == bodies[i]);
  const size_t tail_start = complete == 0 ? 0 : line_ends[complete - 1];
  RC_ASSERT(s.torn_tail == text.substr(tail_start, cut - tail_start));
}

RC_GTEST_PROP(EventCodecProp, GarbageNeverThrowsAndIsAccountedFor, ()) {
  // decode_stream on arbitrary bytes: no exception; every non-empty complete
  // line is either an event or a bad line.
  const std::string text = *rc::gen::arbitrary<std::string>();
  const proto::DecodedStream s = proto::decode_stream(text, "garbage");
  size_t lines = 0;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines += nl > start ? 1 : 0;
  }
  RC_ASSERT(s.events.size() + s.bad_lines.size() == lines);
  RC_ASSERT(s.torn_tail == text.substr(start));
}

}  // namespace
}  // namespace dbh::harness
