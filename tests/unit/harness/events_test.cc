// The worker → supervisor event stream: one JSON object per line, whatever
// the messages contain, and a decoder that survives torn and bad lines.
#include <gtest/gtest.h>

#include <string>

#include "harness/common/error.h"
#include "harness/proto/event_types.h"
#include "harness/proto/events.h"

namespace dbh::harness {
namespace {

using nlohmann::json;

// Whether `line` is exactly one frame: a '\n' at the end and nowhere else, and
// no other control character.
::testing::AssertionResult IsOneFrame(const std::string& line) {
  if (line.empty() || line.back() != '\n') {
    return ::testing::AssertionFailure() << "no trailing newline: " << line;
  }
  for (size_t i = 0; i + 1 < line.size(); ++i) {
    if (static_cast<unsigned char>(line[i]) < 0x20) {
      return ::testing::AssertionFailure()
             << "control byte " << static_cast<int>(line[i]) << " at " << i << ": " << line;
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(EncodeEvent, OneLineWithTypeAndTime) {
  const std::string line = proto::encode_event(proto::event::kStepEnd, {{"run", 0}, {"step", 3}, {"loss", 0.5}}, 1.25);
  EXPECT_TRUE(IsOneFrame(line));
  const json j = json::parse(line);
  EXPECT_EQ(j.at("type"), proto::event::kStepEnd);
  EXPECT_DOUBLE_EQ(j.at("t").get<double>(), 1.25);
  EXPECT_EQ(j.at("step"), 3);
  EXPECT_DOUBLE_EQ(j.at("loss").get<double>(), 0.5);
}

TEST(EncodeEvent, TheTypeArgumentAndTimeWinOverFields) {
  const json j = json::parse(proto::encode_event(proto::event::kHello, {{"type", "spoof"}, {"t", 99}, {"pid", 7}}, 2));
  EXPECT_EQ(j.at("type"), proto::event::kHello);
  EXPECT_EQ(j.at("t"), 2);
  EXPECT_EQ(j.at("pid"), 7);
}

TEST(EncodeEvent, NonObjectFieldsAreDropped) {
  for (const json& fields : {json(nullptr), json(3), json("x"), json::array({1, 2})}) {
    const std::string line = proto::encode_event(proto::event::kHeartbeat, fields, 0);
    EXPECT_TRUE(IsOneFrame(line));
    const json j = json::parse(line);
    EXPECT_EQ(j.size(), 2u) << line;
  }
}

TEST(EncodeEvent, RoundTripsThroughDecodeEvent) {
  const json fields = {{"run", 1},
                       {"step", 42},
                       {"loss", 0.1234567890123},
                       {"loss_bits", 1109676723u},
                       {"memory", {{"rss_bytes", int64_t{1} << 40}}},
                       {"sites", json::array({"a", "b"})},
                       {"ok", true},
                       {"nothing", nullptr},
                       {"negative", -17}};
  const proto::Event e = proto::decode_event(proto::encode_event(proto::event::kStepEnd, fields, 3.5), "x:1");
  EXPECT_EQ(e.type, proto::event::kStepEnd);
  EXPECT_DOUBLE_EQ(e.t, 3.5);
  for (const auto& [k, v] : fields.items()) EXPECT_EQ(e.body.at(k), v) << k;
  EXPECT_EQ(e.get<int64_t>("step", -1), 42);
  EXPECT_EQ(e.get<uint32_t>("loss_bits", 0), 1109676723u);
  EXPECT_EQ(e.get<std::string>("step", "fallback"), "fallback");  // wrong type
  EXPECT_EQ(e.get<int64_t>("nothing", 5), 5);                     // null
  EXPECT_EQ(e.get<int64_t>("absent", 6), 6);
  EXPECT_TRUE(e.has("nothing"));
  EXPECT_FALSE(e.has("absent"));
}

TEST(EncodeEvent, NewlinesAndControlCharactersStayInsideTheLine) {
  std::string message = "line one\nline two\r\nthree\ttab\x01\x02\x1f end\0mid";
  message += std::string("\0after nul", 10);
  message += "\xe2\x80\xa8 (U+2028) \xc3\xa9";
  const std::string line = proto::encode_event(proto::event::kError, {{"message", message}, {"back\ntrace", "k\n"}}, 0);
  EXPECT_TRUE(IsOneFrame(line));
  const auto stream = proto::decode_stream(line + line, "events.jsonl");
  ASSERT_EQ(stream.events.size(), 2u);
  EXPECT_TRUE(stream.bad_lines.empty());
  EXPECT_TRUE(stream.torn_tail.empty());
  EXPECT_EQ(stream.events[0].get<std::string>("message", ""), message);
  EXPECT_EQ(stream.events[1].get<std::string>("back\ntrace", ""), "k\n");
}

TEST(EncodeEvent, InvalidUtf8IsReplacedNotThrown) {
  const std::string bad = std::string("cuDNN \xff\xfe error \xc3 at \x80 end");
  std::string line;
  ASSERT_NO_THROW(line = proto::encode_event(proto::event::kError, {{"message", bad}, {std::string("k\xff"), 1}}, 0));
  EXPECT_TRUE(IsOneFrame(line));
  const auto stream = proto::decode_stream(line, "events.jsonl");
  ASSERT_EQ(stream.events.size(), 1u);
  EXPECT_TRUE(stream.bad_lines.empty());
  const std::string m = stream.events[0].get<std::string>("message", "");
  EXPECT_NE(m.find("cuDNN "), std::string::npos);
  EXPECT_NE(m.find(" end"), std::string::npos);
  EXPECT_NE(m.find("\xef\xbf\xbd"), std::string::npos) << "U+FFFD replacement expected: " << m;
  // The type itself may be malformed too.
  const std::string typed = proto::encode_event("warn\xffing\n", {}, 0);
  EXPECT_TRUE(IsOneFrame(typed));
  EXPECT_EQ(proto::decode_stream(typed, "e").events.size(), 1u);
}

// --- decode_event ------------------------------------------------------------

std::string DecodeError(const std::string& line, const std::string& where) {
  try {
    (void)proto::decode_event(line, where);
  } catch (const ProtocolError& e) {
    return e.what();
  }
  return "";
}

TEST(DecodeEvent, ErrorsNameTheLocation) {
  const auto invalid = DecodeError("{\"type\": \"step_end\", ", "events.jsonl:12");
  EXPECT_EQ(invalid.rfind("events.jsonl:12: expected one JSON object per line, got invalid JSON", 0),
            0u)
      << invalid;
  const auto array = DecodeError("[1, 2]", "events.jsonl:3");
  EXPECT_EQ(array, "events.jsonl:3: expected a JSON object, got array");
  EXPECT_EQ(DecodeError("42", "f:1"), "f:1: expected a JSON object, got number");
  EXPECT_EQ(DecodeError("\"hello\"", "f:1"), "f:1: expected a JSON object, got string");
  EXPECT_EQ(DecodeError("{\"step\": 1}", "f:2"), "f:2: expected a string \"type\", got none");
  EXPECT_EQ(DecodeError("{\"type\": 3}", "f:2"), "f:2: expected a string \"type\", got 3");
  EXPECT_EQ(DecodeError("{\"type\": \"\"}", "f:2"), "f:2: expected a string \"type\", got \"\"");
  EXPECT_NE(DecodeError("", "f:9").find("f:9: "), std::string::npos);
}

// Note [Depth is input]: nesting is counted before anything recurses over it,
// brackets inside strings are text, and the count stops past the limit.
TEST(DecodeEvent, NestingDeeperThanTheLimitIsRefusedUnparsed) {
  EXPECT_EQ(proto::json_nesting("{}"), 1u);
  EXPECT_EQ(proto::json_nesting("{\"a\":[[1],{\"b\":[]}]}"), 4u);
  EXPECT_EQ(proto::json_nesting("{\"a\":\"[[[[{{\\\"[[\"}"), 1u) << "brackets in a string, an escaped quote too";
  auto nested = [](size_t levels) {
    std::string line = "{\"type\":\"hello\",\"config\":{\"k\":";
    return line + std::string(levels, '[') + std::string(levels, ']') + "}}";
  };
  // The event is level 1, config level 2: 62 arrays inside reach the limit.
  EXPECT_EQ(proto::json_nesting(nested(proto::kMaxEventDepth - 2)), proto::kMaxEventDepth);
  EXPECT_NO_THROW(proto::decode_event(nested(proto::kMaxEventDepth - 2), "f:1"));
  EXPECT_EQ(DecodeError(nested(proto::kMaxEventDepth - 1), "f:4"),
            "f:4: expected an event nested at most 64 levels deep, got one deeper (not read; Note [Depth is input])");
  // Half a million levels: refused after counting 65 of them, nothing recursed.
  EXPECT_EQ(proto::json_nesting(nested(500000)), proto::kMaxEventDepth + 1);
  EXPECT_NE(DecodeError(nested(500000), "f:5").find("at most 64 levels"), std::string::npos);
}

TEST(DecodeEvent, ToleratesWhitespaceAndMissingTime) {
  const proto::Event e = proto::decode_event("  {\"type\":\"heartbeat\"}\r", "f:1");
  EXPECT_EQ(e.type, proto::event::kHeartbeat);
  EXPECT_EQ(e.t, 0);
  EXPECT_EQ(proto::decode_event("{\"type\":\"x\",\"t\":\"soon\"}", "f:1").t, 0);
}

// --- decode_stream -----------------------------------------------------------

TEST(DecodeStream, EmptyTextHasNoEvents) {
  const auto s = proto::decode_stream("", "events.jsonl");
  EXPECT_TRUE(s.events.empty());
  EXPECT_TRUE(s.bad_lines.empty());
  EXPECT_TRUE(s.torn_tail.empty());
}

TEST(DecodeStream, TornLastLineIsKeptApartAndNotDecoded) {
  const std::string a = proto::encode_event(proto::event::kStepBegin, {{"step", 0}}, 0.1);
  const std::string b = proto::encode_event(proto::event::kStepEnd, {{"step", 0}}, 0.2);
  const std::string torn = b.substr(0, b.size() / 2);
  const auto s = proto::decode_stream(a + torn, "events.jsonl");
  ASSERT_EQ(s.events.size(), 1u);
  EXPECT_EQ(s.events[0].type, proto::event::kStepBegin);
  EXPECT_EQ(s.torn_tail, torn);
  EXPECT_TRUE(s.bad_lines.empty());
  // A complete object without its '\n' is still a torn write.
  const auto whole = proto::decode_stream(a + b.substr(0, b.size() - 1), "events.jsonl");
  EXPECT_EQ(whole.events.size(), 1u);
  EXPECT_EQ(whole.torn_tail, b.substr(0, b.size() - 1));
}

TEST(DecodeStream, BadLinesAreSkippedAndReportedWithTheirLineNumber) {
  const std::string text = proto::encode_event(proto::event::kHello, {}, 0) + "not json\n" + "\n" +
                           proto::encode_event(proto::event::kRunBegin, {}, 0) + "[1]\n" + "{\"no\":\"type\"}\n" +
                           proto::encode_event(proto::event::kDone, {}, 0);
  const auto s = proto::decode_stream(text, "events.jsonl");
  ASSERT_EQ(s.events.size(), 3u);
  EXPECT_EQ(s.events[0].type, proto::event::kHello);
  EXPECT_EQ(s.events[1].type, proto::event::kRunBegin);
  EXPECT_EQ(s.events[2].type, proto::event::kDone);
  ASSERT_EQ(s.bad_lines.size(), 3u);
  EXPECT_EQ(s.bad_lines[0].rfind("events.jsonl:2: ", 0), 0u) << s.bad_lines[0];
  EXPECT_EQ(s.bad_lines[1].rfind("events.jsonl:5: ", 0), 0u) << s.bad_lines[1];
  EXPECT_EQ(s.bad_lines[2].rfind("events.jsonl:6: ", 0), 0u) << s.bad_lines[2];
  EXPECT_TRUE(s.torn_tail.empty());
}

TEST(DecodeStream, EmptyLinesAreSkippedSilently) {
  const std::string e = proto::encode_event(proto::event::kHeartbeat, {}, 0);
  const auto s = proto::decode_stream("\n\n" + e + "\n\n" + e + "\n", "events.jsonl");
  EXPECT_EQ(s.events.size(), 2u);
  EXPECT_TRUE(s.bad_lines.empty());
  EXPECT_TRUE(s.torn_tail.empty());
}

TEST(DecodeStream, CrLfLineEndingsDecode) {
  const std::string e = proto::encode_event(proto::event::kHeartbeat, {}, 0);
  const auto s = proto::decode_stream(e.substr(0, e.size() - 1) + "\r\n" + e, "events.jsonl");
  EXPECT_EQ(s.events.size(), 2u);
  EXPECT_TRUE(s.bad_lines.empty());
}

}  // namespace
}  // namespace dbh::harness

// Note [Checkpoint names]
namespace dbh::harness {
namespace {

// Note [A worker's stream is bounded]: a line over proto::kMaxEventLineBytes is one
// bad line whether it arrives whole or in pieces, and is never held; at most
// kMaxBadLines bad lines are kept, the last saying how many more there were.
TEST(DecodeStream, AnOverlongLineIsSkippedWholeOrInPiecesAndBadLinesAreBounded) {
  const std::string huge(proto::kMaxEventLineBytes + 10, 'x');
  const std::string text = "{\"type\":\"hello\"}\n" + huge + "\n{\"type\":\"done\"}\n";
  const auto whole = proto::decode_stream(text, "e");
  ASSERT_EQ(whole.events.size(), 2u);
  ASSERT_EQ(whole.bad_lines.size(), 1u);
  EXPECT_NE(whole.bad_lines[0].find("got " + std::to_string(huge.size()) + " bytes (skipped)"), std::string::npos);
  proto::StreamDecoder pieces("e");
  std::vector<proto::Event> events;
  std::vector<std::string> bad;
  for (size_t at = 0; at < text.size(); at += 4096) {
    pieces.feed(std::string_view(text).substr(at, 4096), [&](proto::Event&& e) { events.push_back(std::move(e)); }, bad);
    EXPECT_LE(pieces.pending().size(), proto::kMaxEventLineBytes);
  }
  EXPECT_EQ(events.size(), 2u);
  EXPECT_EQ(bad, whole.bad_lines);
  std::string garbage;
  for (int i = 0; i < 250; ++i) garbage += "not json\n";
  const auto many = proto::decode_stream(garbage, "g");
  ASSERT_EQ(many.bad_lines.size(), proto::kMaxBadLines + 1);
  EXPECT_EQ(many.bad_lines.back(), "g: 150 more bad line(s) not kept (at most 100 are)");
}

TEST(CheckpointNames, WrittenAndReadBackAsTheProtocolSays) {
  EXPECT_EQ(proto::checkpoint_file_name(0, 16), "checkpoint-r0-s16.pt");
  const auto n = proto::parse_checkpoint_file_name("checkpoint-r2-s128.pt");
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->run, 2);
  EXPECT_EQ(n->step, 128);
  for (const char* other : {"checkpoint-final.pt", "checkpoint-16.pt", "checkpoint-r0-s.pt", "checkpoint-r-s1.pt",
                            "checkpoint-r0-s1.pt.tmp", "checkpoint-r0-s-1.pt", "checkpoint-r0-s1x.pt",
                            "checkpoint-r0s1.pt", "xcheckpoint-r0-s1.pt"}) {
    EXPECT_FALSE(proto::parse_checkpoint_file_name(other).has_value()) << other;
  }
}

}  // namespace
}  // namespace dbh::harness

namespace dbh::harness {
namespace {

// Note [Reading JSON that may lie]: a typed reader never converts a number
// outside the field's type (undefined behaviour: the structure-aware fuzzer
// found a 6e307 read as a step); it reads it as absent.
TEST(EventFields, ANumberOutsideTheFieldsTypeIsAbsent) {
  const auto event = [](const std::string& step) {
    return proto::decode_event("{\"type\":\"health\",\"run\":0,\"step\":" + step + ",\"check\":\"finite\"}", "f:1");
  };
  EXPECT_EQ(proto::health_from(event("3")).step, 3);
  for (const char* bad : {"6.12949e+307", "-1e300", "18446744073709551615", "\"3\"", "[3]", "true"}) {
    EXPECT_EQ(event(bad).get<int64_t>("step", -7), -7) << bad;
  }
  nlohmann::json j = {{"a", -1}, {"b", 4294967296LL}, {"c", 2.5}, {"d", 1e19}};
  EXPECT_FALSE(optional_field<uint32_t>(j, "a"));
  EXPECT_FALSE(optional_field<uint32_t>(j, "b"));
  EXPECT_EQ(optional_field<int32_t>(j, "c"), 2);
  EXPECT_FALSE(optional_field<int64_t>(j, "d"));
  EXPECT_EQ(optional_field<double>(j, "d"), 1e19);
  EXPECT_FALSE(optional_field<bool>(j, "a"));
}

}  // namespace
}  // namespace dbh::harness
