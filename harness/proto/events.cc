#include "harness/proto/events.h"

#include <algorithm>

#include "harness/common/error.h"
#include "harness/common/text.h"

namespace dbh::harness::proto {

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

size_t json_nesting(std::string_view text, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character is text
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

Event decode_event(const std::string& line, const std::string& where) {
  if (json_nesting(line) > kMaxEventDepth) {
    throw ProtocolError(where + ": expected an event nested at most " + std::to_string(kMaxEventDepth) +
                        " levels deep, got one deeper (not read; Note [Depth is input])");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {  // parse errors and number overflows
    throw ProtocolError(where + ": expected one JSON object per line, got invalid JSON (" +
                        truncate_utf8(e.what(), 300) + ")");
  }
  if (!j.is_object()) {
    throw ProtocolError(where + ": expected a JSON object, got " + std::string(j.type_name()));
  }
  const auto type = j.find("type");
  if (type == j.end() || !type->is_string() || type->get<std::string>().empty()) {
    throw ProtocolError(where + ": expected a string \"type\", got " +
                        (type == j.end() ? std::string("none") : truncate_utf8(type->dump(), 100)));
  }
  Event e;
  e.type = type->get<std::string>();
  const auto t = j.find("t");
  if (t != j.end() && t->is_number()) e.t = t->get<double>();
  e.body = std::move(j);
  return e;
}

std::string bad_lines_note(const std::vector<std::string>& bad_lines) {
  if (bad_lines.empty()) return "";
  std::string note = "; the event stream's bad line(s): " + truncate_utf8(bad_lines[0], 300);
  if (bad_lines.size() > 1) note += "; " + truncate_utf8(bad_lines[1], 300);
  if (bad_lines.size() > 2) note += " (and " + std::to_string(bad_lines.size() - 2) + " more)";
  return note;
}

void StreamDecoder::bad(std::string why, std::vector<std::string>& bad_lines) {
  if (bad_lines.size() < kMaxBadLines) {
    bad_lines.push_back(std::move(why));
    return;
  }
  // The last kept entry says how many more there were.
  ++bad_dropped_;
  const std::string more = name_ + ": " + std::to_string(bad_dropped_) + " more bad line(s) not kept (at most " +
                           std::to_string(kMaxBadLines) + " are)";
  if (bad_dropped_ == 1) {
    bad_lines.push_back(more);
  } else {
    bad_lines.back() = more;
  }
}

void StreamDecoder::feed(std::string_view data, const std::function<void(Event&&)>& on_event,
                         std::vector<std::string>& bad_lines) {
  while (!data.empty()) {
    const size_t nl = data.find('\n');
    const std::string_view piece = data.substr(0, nl == std::string_view::npos ? data.size() : nl);
    if (!skipping_ && pending_.size() + piece.size() > kMaxEventLineBytes) {
      skipping_ = true;  // the line is too long: count it, hold none of it
      skipped_bytes_ = pending_.size();
      pending_.clear();
    }
    if (skipping_) {
      skipped_bytes_ += piece.size();
    } else {
      pending_.append(piece);
    }
    if (nl == std::string_view::npos) return;
    data.remove_prefix(nl + 1);
    ++line_no_;
    const std::string where = name_ + ":" + std::to_string(line_no_);
    if (skipping_) {
      bad(where + ": expected an event line of at most " + std::to_string(kMaxEventLineBytes) + " bytes, got " +
              std::to_string(skipped_bytes_) + " bytes (skipped)",
          bad_lines);
      skipping_ = false;
      skipped_bytes_ = 0;
      continue;
    }
    std::string line;
    line.swap(pending_);
    if (line.empty()) continue;
    Event e;
    try {
      e = decode_event(line, where);
    } catch (const ProtocolError& error) {
      bad(error.what(), bad_lines);
      continue;
    }
    on_event(std::move(e));
  }
}

DecodedStream decode_stream(const std::string& text, const std::string& name) {
  DecodedStream out;
  StreamDecoder decoder(name);
  decoder.feed(text, [&](Event&& e) { out.events.push_back(std::move(e)); }, out.bad_lines);
  out.torn_tail = decoder.pending();
  return out;
}

}  // namespace dbh::harness::proto
