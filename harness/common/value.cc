#include "harness/common/value.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "harness/common/error.h"
#include "harness/common/files.h"
#include "harness/common/text.h"

namespace dbh::harness {

std::string Location::str() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

const Value* Value::find(const std::string& key) const {
  for (const auto& [k, v] : map) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Value::find(const std::string& key) {
  for (auto& [k, v] : map) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::set(const std::string& key, Value v) {
  if (Value* existing = find(key)) {
    *existing = std::move(v);
    return;
  }
  map.emplace_back(key, std::move(v));
}

std::string Value::describe() const {
  switch (kind) {
    case Kind::kNull: return "null";
    case Kind::kMap: return "a map";
    case Kind::kSeq: return "a list";
    case Kind::kScalar: return quoted_excerpt(scalar);
  }
  return "?";
}

namespace {

Location mark_of(const YAML::Node& n, const std::string& file) {
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return Location{file, 0, 0};
  return Location{file, m.line + 1, m.column + 1};
}

// Bounds on what one YAML document may expand to: aliases are shared nodes,
// so a document of a few lines can stand for billions of values (an alias
// bomb), and an alias inside its own anchor stands for an infinite one.
constexpr int kMaxDepth = 64;
constexpr int64_t kMaxValues = 100000;

// Whether the quoted scalar opening at text[pos] ('"' or '\'') is closed
// before the end of the text. yaml-cpp 0.7 ends an unclosed one at the end of
// the stream: the keys after it would silently become its text.
bool quote_closed(const std::string& text, size_t pos) {
  const char quote = text[pos];
  for (size_t i = pos + 1; i < text.size(); ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;  // an escape: the next character is text
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is a quote inside single quotes
      } else {
        return true;
      }
    }
  }
  return false;
}

struct Converter {
  const std::string& file;
  const std::string& text;  // what was parsed
  int64_t values = 0;
  std::vector<YAML::Node> path;  // ancestors of the node being converted

  Value convert(const YAML::Node& n) {
    Value v;
    v.loc = mark_of(n, file);
    for (const auto& a : path) {
      if (a.is(n)) {
        throw ScenarioError(v.loc.str() + ": expected a YAML alias that refers to a finished value, got an alias "
                            "inside its own anchor (a recursive alias)");
      }
    }
    if (++values > kMaxValues) {
      throw ScenarioError(v.loc.str() + ": expected at most " + std::to_string(kMaxValues) +
                          " values (aliases expanded), got more (a file that large, or an alias expansion bomb)");
    }
    if (static_cast<int>(path.size()) >= kMaxDepth) {
      throw ScenarioError(v.loc.str() + ": expected values nested at most " + std::to_string(kMaxDepth) +
                          " levels deep, got deeper nesting");
    }
    switch (n.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        v.kind = Value::Kind::kNull;
        break;
      case YAML::NodeType::Scalar: {
        v.kind = Value::Kind::kScalar;
        v.scalar = n.Scalar();
        const auto pos = static_cast<size_t>(std::max(n.Mark().pos, 0));
        if (n.Tag() == "!" && pos < text.size() && (text[pos] == '"' || text[pos] == '\'') &&
            !quote_closed(text, pos)) {
          throw ScenarioError(v.loc.str() + ": expected valid YAML, got a quoted string that is never closed (its " +
                              (text[pos] == '"' ? "\"" : "'") + " opens here; what follows would become its text)");
        }
        // "~" and "null" are YAML nulls.
        if (n.Tag() == "?" && (v.scalar == "~" || v.scalar == "null" || v.scalar == "Null" ||
                               v.scalar == "NULL")) {
          v.kind = Value::Kind::kNull;
          v.scalar.clear();
        }
        break;
      }
      case YAML::NodeType::Sequence:
        v.kind = Value::Kind::kSeq;
        path.push_back(n);
        for (const auto& item : n) v.seq.push_back(convert(item));
        path.pop_back();
        break;
      case YAML::NodeType::Map:
        v.kind = Value::Kind::kMap;
        path.push_back(n);
        for (const auto& item : n) {
          if (!item.first.IsScalar()) {
            throw ScenarioError(mark_of(item.first, file).str() + ": expected a plain key, got " +
                                (item.first.IsMap() ? "a map" : item.first.IsSequence() ? "a list" : "null") +
                                " as a key");
          }
          const std::string key = item.first.Scalar();
          Value child = convert(item.second);
          child.key_loc = mark_of(item.first, file);
          if (v.find(key) != nullptr) {
            throw ScenarioError(child.key_loc.str() + ": " + key + ": expected each key once, got a duplicate");
          }
          v.map.emplace_back(key, std::move(child));
        }
        path.pop_back();
        break;
    }
    return v;
  }
};

}  // namespace

namespace {

// YAML admits only printable characters (YAML 1.2, "c-printable"): of the
// ASCII controls, tab, line feed and carriage return. yaml-cpp's multi-document
// reader loops forever on some inputs holding a NUL byte, so anything else is
// refused here, before the parser sees it, naming where it is.
void check_printable(const std::string& text, const std::string& file) {
  int line = 1;
  int column = 1;
  for (const char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    if (byte == '\n') {
      ++line;
      column = 1;
      continue;
    }
    if ((byte < 0x20 && byte != '\t' && byte != '\r') || byte == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", byte);
      throw ScenarioError(Location{file, line, column}.str() +
                          ": expected text (YAML allows no control characters but tab, line feed and carriage " +
                          "return), got the byte " + hex);
    }
    ++column;
  }
}

// Reads the documents of a YAML stream as events, without building them: what
// parse_yaml needs to know about the documents after the first.
class DocumentScan : public YAML::EventHandler {
 public:
  YAML::Mark start;          // where the current document begins
  YAML::Mark content;        // its first node that is not null
  bool has_content = false;

  void OnDocumentStart(const YAML::Mark& mark) override {
    start = mark;
    has_content = false;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { note(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    note(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    note(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    note(mark);
  }
  void OnMapEnd() override {}

 private:
  void note(const YAML::Mark& mark) {
    if (!has_content) content = mark;
    has_content = true;
  }
};

Location location_of(const YAML::Mark& mark, const std::string& file) {
  return Location{file, mark.line + 1, mark.column + 1};
}

// Refuses a stream holding more than one document. A second document ("---"
// after the first) would be silently dropped by a single-document read: the
// user meant something by it. An empty one (a trailing "---") says nothing and
// is let be. yaml-cpp 0.7 reports, for some invalid inputs (a lone ","), a
// document that consumes nothing, forever (its YAML::LoadAll never returns);
// a document starting where the previous one started is that, and a syntax error.
void check_one_document(const std::string& text, const std::string& file) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentScan scan;
  size_t documents = 0;
  YAML::Mark previous;
  while (parser.HandleNextDocument(scan)) {
    ++documents;
    if (documents > 1 && scan.start.pos == previous.pos) {
      throw ScenarioError(location_of(scan.start, file).str() +
                          ": expected valid YAML, got a syntax error: a character no YAML rule accepts here");
    }
    if (documents > 1 && scan.has_content) {
      throw ScenarioError(location_of(scan.content, file).str() + ": expected one YAML document, got another " +
                          "after the first (a \"---\" separator starts it; its settings would be ignored)");
    }
    previous = scan.start;
  }
}

}  // namespace

Value parse_yaml(const std::string& text, const std::string& file) {
  check_printable(text, file);
  YAML::Node node;
  try {
    check_one_document(text, file);
    node = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ScenarioError(location_of(e.mark, file).str() + ": expected valid YAML, got a syntax error: " + e.msg);
  }
  Converter converter{file, text, 0, {}};
  return converter.convert(node);
}

Value load_yaml_file(const std::string& path) {
  return parse_yaml(read_input_file(path, "a scenario file"), path);
}

void merge_into(Value& base, const Value& overlay) {
  if (base.is_map() && overlay.is_map()) {
    for (const auto& [k, v] : overlay.map) {
      if (Value* existing = base.find(k)) {
        merge_into(*existing, v);
      } else {
        base.map.emplace_back(k, v);
      }
    }
    return;
  }
  base = overlay;
}

namespace {
bool parse_index(const std::string& s, size_t* out) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}
}  // namespace

bool is_override(const std::string& word) { return word.find('=') != std::string::npos; }

std::string override_key(const std::string& text) { return text.substr(0, text.find('=')); }

void apply_override(Value& root, const std::string& text) {
  const std::string where = "<override> " + text;
  const auto eq = text.find('=');
  if (eq == std::string::npos) {
    throw ScenarioError(where + ": expected key.path=value, got no '='");
  }
  if (eq == 0) throw ScenarioError(where + ": expected a key before '=', got an empty key");
  const std::string path = text.substr(0, eq);
  const std::string raw = text.substr(eq + 1);
  std::vector<std::string> parts;
  size_t begin = 0;
  for (;;) {
    const size_t dot = path.find('.', begin);
    const std::string part = path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (part.empty()) {
      throw ScenarioError(where + ": expected dot-separated key names, got an empty key in \"" +
                          path + "\"");
    }
    parts.push_back(part);
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  Value value = raw.empty() ? Value{} : parse_yaml(raw, where);
  if (raw.empty()) value.kind = Value::Kind::kScalar;  // "key=" sets an empty string
  value.loc = Location{where, 0, 0};
  value.key_loc = value.loc;
  Value* cur = &root;
  if (cur->is_null()) cur->kind = Value::Kind::kMap;
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    size_t index = 0;
    if (cur->is_seq() && parse_index(parts[i], &index)) {
      if (index >= cur->seq.size()) {
        throw ScenarioError(where + ": " + path + ": expected an index below " +
                            std::to_string(cur->seq.size()) + ", got " + parts[i]);
      }
      if (last) {
        cur->seq[index] = value;
        return;
      }
      cur = &cur->seq[index];
      continue;
    }
    if (cur->is_null()) cur->kind = Value::Kind::kMap;
    if (!cur->is_map()) {
      throw ScenarioError(where + ": " + path + ": expected " + parts[i - 1] +
                          " to be a map, got " + cur->describe());
    }
    if (last) {
      Value* existing = cur->find(parts[i]);
      if (existing != nullptr && existing->is_map() && value.is_map()) {
        merge_into(*existing, value);
      } else {
        cur->set(parts[i], value);
      }
      return;
    }
    Value* next = cur->find(parts[i]);
    if (next == nullptr) {
      Value m;
      m.kind = Value::Kind::kMap;
      m.loc = value.loc;
      m.key_loc = value.loc;
      cur->set(parts[i], m);
      next = cur->find(parts[i]);
    }
    cur = next;
  }
}

namespace {
nlohmann::ordered_json to_json_value(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kNull: return nullptr;
    case Value::Kind::kSeq: {
      auto a = nlohmann::ordered_json::array();
      for (const auto& x : v.seq) a.push_back(to_json_value(x));
      return a;
    }
    case Value::Kind::kMap: {
      auto o = nlohmann::ordered_json::object();
      for (const auto& [k, x] : v.map) o[k] = to_json_value(x);
      return o;
    }
    case Value::Kind::kScalar: {
      const std::string& s = v.scalar;
      if (s == "true") return true;
      if (s == "false") return false;
      int64_t i = 0;
      auto r = std::from_chars(s.data(), s.data() + s.size(), i);
      if (!s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size()) return i;
      return s;
    }
  }
  return nullptr;
}
}  // namespace

std::string to_json(const Value& v, int indent) {
  return to_json_value(v).dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace dbh::harness
