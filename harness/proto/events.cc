#include "harness/proto/events.h"

#include "harness/common/error.h"

namespace dbh::harness {

std::string encode_event(const std::string& type, nlohmann::json fields, double t) {
  if (type.empty()) throw ProtocolError("encode_event: expected an event type, got an empty one");
  if (!fields.is_object()) fields = nlohmann::json::object();
  nlohmann::json out = nlohmann::json::object();
  out["type"] = type;
  out["t"] = t;
  for (auto it = fields.begin(); it != fields.end(); ++it) {
    if (it.key() != "type" && it.key() != "t") out[it.key()] = it.value();
  }
  // dump() escapes control characters, so the line has no raw newline.
  // Invalid UTF-8 in messages is replaced rather than thrown on.
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Event decode_event(const std::string& line, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {  // parse errors and number overflows
    throw ProtocolError(where + ": expected one JSON object per line, got invalid JSON (" +
                        std::string(e.what()) + ")");
  }
  if (!j.is_object()) {
    throw ProtocolError(where + ": expected a JSON object, got " + std::string(j.type_name()));
  }
  const auto type = j.find("type");
  if (type == j.end() || !type->is_string() || type->get<std::string>().empty()) {
    throw ProtocolError(where + ": expected a string \"type\", got " +
                        (type == j.end() ? std::string("none") : type->dump()));
  }
  Event e;
  e.type = type->get<std::string>();
  const auto t = j.find("t");
  if (t != j.end() && t->is_number()) e.t = t->get<double>();
  e.body = std::move(j);
  return e;
}

DecodedStream decode_stream(const std::string& text, const std::string& name) {
  DecodedStream out;
  size_t start = 0;
  int line_no = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    if (nl == std::string::npos) {
      out.torn_tail = text.substr(start);
      break;
    }
    ++line_no;
    const std::string line = text.substr(start, nl - start);
    start = nl + 1;
    if (line.empty()) continue;
    try {
      out.events.push_back(decode_event(line, name + ":" + std::to_string(line_no)));
    } catch (const ProtocolError& e) {
      out.bad_lines.push_back(e.what());
    }
  }
  return out;
}

}  // namespace dbh::harness
