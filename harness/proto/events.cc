#include "harness/proto/events.h"

#include "harness/common/error.h"

namespace dbh::harness {

bool event::is_known(std::string_view type) {
  for (const char* known : kAll) {
    if (type == known) return true;
  }
  return false;
}

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

void StreamDecoder::feed(std::string_view data, const std::function<void(Event&&)>& on_event,
                         std::vector<std::string>& bad_lines) {
  pending_.append(data);
  size_t start = 0;
  for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
    ++line_no_;
    if (nl == start) continue;
    Event e;
    try {
      e = decode_event(pending_.substr(start, nl - start), name_ + ":" + std::to_string(line_no_));
    } catch (const ProtocolError& bad) {
      bad_lines.push_back(bad.what());
      continue;
    }
    on_event(std::move(e));
  }
  pending_.erase(0, start);
}

DecodedStream decode_stream(const std::string& text, const std::string& name) {
  DecodedStream out;
  StreamDecoder decoder(name);
  decoder.feed(text, [&](Event&& e) { out.events.push_back(std::move(e)); }, out.bad_lines);
  out.torn_tail = decoder.pending();
  return out;
}

}  // namespace dbh::harness
