#include "model/data/annotation.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <charconv>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <utility>

#include "model/data/image_decode.h"
#include "model/label/shrink.h"

namespace dbh::model {
namespace {

using nlohmann::json;

// Longest excerpt of an offending value quoted in a message.
constexpr size_t kMaxQuoted = 60;

// Reads a whole annotation file. Only regular files are read (a FIFO or a
// device would block or never end), up to kMaxAnnotationBytes. On failure
// returns false and says what the path is in `why`.
constexpr std::uintmax_t kMaxAnnotationBytes = std::uintmax_t{1} << 30;

bool read_bytes(const std::string& path, std::string* out, std::string* why = nullptr) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  auto say = [&](const std::string& w) {
    if (why != nullptr) *why = w;
    return false;
  };
  if (ec) return say(ec.value() == ELOOP ? "a symlink loop" : "an unreadable path (" + ec.message() + ")");
  if (st.type() == std::filesystem::file_type::not_found) return say("no file");
  if (st.type() == std::filesystem::file_type::directory) return say("a directory");
  if (st.type() == std::filesystem::file_type::fifo) return say("a FIFO");
  if (st.type() == std::filesystem::file_type::character) return say("a character device");
  if (st.type() == std::filesystem::file_type::block) return say("a block device");
  if (st.type() == std::filesystem::file_type::socket) return say("a socket");
  if (st.type() != std::filesystem::file_type::regular) return say("a special file");
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxAnnotationBytes) {
    return say("a file of " + std::to_string(size) + " bytes (at most " + std::to_string(kMaxAnnotationBytes) +
               " are read)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return say(std::string("a file it cannot open (") + std::strerror(errno) + ")");
  out->assign(std::istreambuf_iterator<char>(in),
              std::istreambuf_iterator<char>());
  if (in.bad()) return say("a read error");
  return true;
}

std::string quoted(std::string s) {
  if (s.size() > kMaxQuoted) s = s.substr(0, kMaxQuoted) + "...";
  return "\"" + s + "\"";
}

// A JSON value as it appears in a message: its type and a short excerpt.
// Quotes a JSON value for a message without recursing into deep containers
// (dump() recurses once per level and overflows the stack on hostile input).
void describe_into(const json& j, std::string& out, int depth) {
  if (out.size() > kMaxQuoted) return;
  if (j.is_array() || j.is_object()) {
    if (depth >= 4) {
      out += j.is_array() ? "[…]" : "{…}";
      return;
    }
    out += j.is_array() ? "[" : "{";
    bool first = true;
    for (auto it = j.begin(); it != j.end() && out.size() <= kMaxQuoted; ++it) {
      if (!first) out += ",";
      first = false;
      if (j.is_object()) out += json(it.key()).dump() + ":";
      describe_into(*it, out, depth + 1);
    }
    out += j.is_array() ? "]" : "}";
    return;
  }
  out += j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string describe(const json& j) {
  std::string text;
  describe_into(j, text, 0);
  if (text.size() > kMaxQuoted) text = text.substr(0, kMaxQuoted) + "...";
  return std::string(j.type_name()) + " " + text;
}

std::string format_point(const Point& p) {
  std::ostringstream s;
  // Enough digits that a value just outside a bound never prints as the bound.
  s.precision(10);
  s << "(" << p.x << ", " << p.y << ")";
  return s.str();
}

// Builds defects whose messages start with "file[:line]: image 'x', word 'y':
// ".
class DefectSink {
 public:
  DefectSink(std::vector<Defect>* out, std::string file)
      : out_(out), file_(std::move(file)) {}

  void add(DefectKind kind, const std::string& image,
           const std::string& word_id, int line, const std::string& what,
           int column = 0) {
    std::ostringstream m;
    m << file_;
    if (line > 0) m << ":" << line;
    if (line > 0 && column > 0) m << ":" << column;
    m << ": ";
    if (!image.empty()) m << "image " << quoted(image);
    if (!word_id.empty()) {
      m << (image.empty() ? "" : ", ") << "word " << quoted(word_id);
    }
    if (!image.empty() || !word_id.empty()) m << ": ";
    m << what;
    out_->push_back({kind, file_, image, word_id, line, m.str()});
  }

 private:
  std::vector<Defect>* out_;
  std::string file_;
};

// 1-based line and column of byte offset `pos` (nlohmann reports the number
// of bytes read, i.e. one past the offending byte).
std::pair<int, int> line_column(const std::string& text, size_t pos) {
  pos = std::min(pos, text.size());
  int line = 1;
  int column = 1;
  for (size_t i = 0; i + 1 < pos; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// Reads img_w / img_h: a positive integer (an integral float is accepted).
void read_size(const json& img, const char* key, const std::string& name,
               int* out, DefectSink& sink) {
  const auto it = img.find(key);
  const std::string where = std::string(key) + ": ";
  if (it == img.end()) {
    sink.add(DefectKind::kBadJsonShape, name, "", 0,
             where + "expected a positive integer, got no such key");
    return;
  }
  if (it->is_number()) {
    const double v = it->get<double>();
    if (v >= 1 && v <= INT_MAX && std::floor(v) == v) {
      *out = static_cast<int>(v);
      return;
    }
  }
  sink.add(DefectKind::kBadJsonType, name, "", 0,
           where + "expected a positive integer, got " + describe(*it));
}

// Reads a UFO points array into `poly`; false (and one defect) if it is not
// an array of [number, number] pairs.
bool read_points(const json& word, const std::string& name,
                 const std::string& id, Polygon* poly, DefectSink& sink) {
  const auto it = word.find("points");
  if (it == word.end()) {
    sink.add(DefectKind::kBadJsonShape, name, id, 0,
             "points: expected an array of [x, y] pairs, got no such key");
    return false;
  }
  if (!it->is_array()) {
    sink.add(DefectKind::kBadJsonType, name, id, 0,
             "points: expected an array of [x, y] pairs, got " + describe(*it));
    return false;
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const json& pt = (*it)[i];
    const std::string where = "points[" + std::to_string(i) + "]: ";
    if (!pt.is_array()) {
      sink.add(DefectKind::kBadJsonType, name, id, 0,
               where + "expected an [x, y] pair, got " + describe(pt));
      return false;
    }
    if (pt.size() != 2) {
      sink.add(DefectKind::kBadJsonShape, name, id, 0,
               where + "expected 2 numbers, got " + std::to_string(pt.size()) +
                   " values");
      return false;
    }
    for (size_t c = 0; c < 2; ++c) {
      if (!pt[c].is_number()) {
        sink.add(DefectKind::kBadJsonType, name, id, 0,
                 "points[" + std::to_string(i) + "][" + std::to_string(c) +
                     "]: expected a number, got " + describe(pt[c]));
        return false;
      }
    }
    poly->push_back({pt[0].get<double>(), pt[1].get<double>()});
  }
  return true;
}

void read_word(const std::string& name, const std::string& id, const json& word,
               const std::vector<std::string>& ignore_tags,
               ImageAnnotation* image, DefectSink& sink) {
  if (!word.is_object()) {
    sink.add(DefectKind::kBadJsonType, name, id, 0,
             "expected an object, got " + describe(word));
    return;
  }
  WordAnnotation w;
  w.id = id;
  if (!read_points(word, name, id, &w.points, sink)) return;

  if (const auto t = word.find("transcription"); t != word.end()) {
    if (t->is_string()) {
      w.transcription = t->get<std::string>();
    } else if (!t->is_null()) {
      sink.add(DefectKind::kBadJsonType, name, id, 0,
               "transcription: expected a string or null, got " + describe(*t));
    }
  }
  if (const auto il = word.find("illegibility"); il != word.end()) {
    if (il->is_boolean()) {
      w.ignore = il->get<bool>();
    } else if (!il->is_null()) {
      // Unknown legibility: safer as "don't care" than as a positive.
      w.ignore = true;
      sink.add(DefectKind::kBadJsonType, name, id, 0,
               "illegibility: expected a boolean, got " + describe(*il));
    }
  }
  if (const auto tags = word.find("tags"); tags != word.end()) {
    bool well_formed = tags->is_null() || tags->is_array();
    if (tags->is_array()) {
      for (const json& tag : *tags) {
        if (!tag.is_string()) {
          well_formed = false;
          continue;
        }
        const std::string& s = tag.get_ref<const std::string&>();
        if (std::find(ignore_tags.begin(), ignore_tags.end(), s) !=
            ignore_tags.end()) {
          w.ignore = true;
        }
      }
    }
    if (!well_formed) {
      sink.add(DefectKind::kBadJsonType, name, id, 0,
               "tags: expected an array of strings, got " + describe(*tags));
    }
  }
  image->words.push_back(std::move(w));
}

// Where a key of a JSON object is written: its 1-based line and its
// 0-based position among the object's members.
struct KeyPlace {
  int line = 0;
  size_t entry = 0;
};

// A key written twice in one object. `path` holds the keys of the enclosing
// objects ("[i]" for an array element), outermost first.
struct DuplicateKey {
  std::vector<std::string> path;
  std::string key;
  KeyPlace first;
  KeyPlace again;
};

struct KeyScan {
  std::vector<DuplicateKey> duplicates;
  // Line of each key of the root's "images" object (its last occurrence,
  // the one a JSON reader keeps).
  std::map<std::string, int> image_lines;
};

// The decoded text of JSON string token `token` (quotes included).
std::string decode_key(std::string_view token) {
  if (token.find('\\') == std::string_view::npos) return std::string(token.substr(1, token.size() - 2));
  try {
    return json::parse(token).get<std::string>();
  } catch (const json::exception&) {
    return std::string(token.substr(1, token.size() - 2));
  }
}

// Walks `text`, which json::parse accepted, and finds every key written
// twice in one object: nlohmann::json (like Python's json) silently keeps the
// last. Iterative, so any depth the parser accepted is fine.
KeyScan scan_keys(std::string_view text) {
  struct Frame {
    bool object = false;
    bool expect_key = false;
    size_t members = 0;  // keys seen (object) or commas (array)
    std::string last_key;
    std::map<std::string, KeyPlace> keys;
  };
  KeyScan out;
  std::vector<Frame> stack;
  std::vector<std::string> path;  // one name per frame but the root
  int line = 1;
  size_t i = text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  const auto in_images = [&] { return path.size() == 1 && path[0] == "images"; };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      ++i;
    } else if (c == '{' || c == '[') {
      if (!stack.empty()) {
        const Frame& parent = stack.back();
        path.push_back(parent.object ? parent.last_key : "[" + std::to_string(parent.members) + "]");
      }
      Frame f;
      f.object = c == '{';
      f.expect_key = f.object;
      stack.push_back(std::move(f));
      if (in_images()) out.image_lines.clear();  // a later "images" replaces an earlier one
      ++i;
    } else if (c == '}' || c == ']') {
      if (stack.empty()) break;
      stack.pop_back();
      if (!stack.empty()) path.pop_back();  // the root has no name
      ++i;
    } else if (c == ',') {
      if (!stack.empty()) {
        if (stack.back().object) {
          stack.back().expect_key = true;
        } else {
          ++stack.back().members;
        }
      }
      ++i;
    } else if (c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"') j += text[j] == '\\' ? 2 : 1;
      if (j >= text.size()) break;
      if (!stack.empty() && stack.back().object && stack.back().expect_key) {
        Frame& f = stack.back();
        std::string key = decode_key(text.substr(i, j + 1 - i));
        const KeyPlace here{line, f.members++};
        const auto [it, inserted] = f.keys.emplace(key, here);
        if (!inserted) out.duplicates.push_back({path, key, it->second, here});
        if (stack.size() == 2 && in_images()) out.image_lines[key] = line;
        f.last_key = std::move(key);
        f.expect_key = false;
      }
      i = j + 1;
    } else {
      ++i;
    }
  }
  return out;
}

// One defect per key written twice (see scan_keys).
void report_duplicate_keys(const std::vector<DuplicateKey>& duplicates, DefectSink& sink) {
  for (const auto& d : duplicates) {
    const std::string lines = "line " + std::to_string(d.first.line) + " and line " + std::to_string(d.again.line);
    const std::string entries = " (entries " + std::to_string(d.first.entry) + " and " +
                                std::to_string(d.again.entry) + " of ";
    const std::string kept = "; a JSON reader silently keeps only the last";
    const auto& p = d.path;
    if (p.size() == 1 && p[0] == "images") {
      sink.add(DefectKind::kDuplicateImage, d.key, "", d.again.line,
               "expected each image once in \"images\", got this key twice: at " + lines + entries +
                   "\"images\")" + kept);
    } else if (p.size() == 2 && p[0] == "images") {
      sink.add(DefectKind::kDuplicateKey, p[1], "", d.again.line,
               quoted(d.key) + ": expected each key once per image, got it twice: at " + lines + kept);
    } else if (p.size() == 3 && p[0] == "images" && p[2] == "words") {
      sink.add(DefectKind::kDuplicateKey, p[1], d.key, d.again.line,
               "expected each word id once in \"words\", got this id twice: at " + lines + entries + "\"words\")" +
                   kept);
    } else if (p.size() == 4 && p[0] == "images" && p[2] == "words") {
      sink.add(DefectKind::kDuplicateKey, p[1], p[3], d.again.line,
               quoted(d.key) + ": expected each key once per word, got it twice: at " + lines + kept);
    } else {
      std::string where;
      for (const auto& part : p) where += (where.empty() || part.front() == '[' ? "" : ".") + part;
      sink.add(DefectKind::kDuplicateKey, "", "", d.again.line,
               (where.empty() ? std::string("root") : quoted(where)) + ": expected each key once per object, got " +
                   quoted(d.key) + " twice: at " + lines + kept);
    }
  }
}

void read_ufo_document(const json& doc,
                       const std::vector<std::string>& ignore_tags,
                       ReadResult* result, DefectSink& sink) {
  if (!doc.is_object()) {
    sink.add(DefectKind::kBadJsonType, "", "", 0,
             "root: expected an object, got " + describe(doc));
    return;
  }
  const auto images = doc.find("images");
  if (images == doc.end()) {
    sink.add(DefectKind::kBadJsonShape, "", "", 0,
             "images: expected an object of images, got no such key");
    return;
  }
  if (!images->is_object()) {
    sink.add(DefectKind::kBadJsonType, "", "", 0,
             "images: expected an object of images, got " + describe(*images));
    return;
  }
  for (const auto& [name, img] : images->items()) {
    if (!img.is_object()) {
      sink.add(DefectKind::kBadJsonType, name, "", 0,
               "expected an object, got " + describe(img));
      continue;
    }
    ImageAnnotation image;
    image.file = name;
    read_size(img, "img_w", name, &image.width, sink);
    read_size(img, "img_h", name, &image.height, sink);
    const auto words = img.find("words");
    if (words == img.end()) {
      sink.add(DefectKind::kBadJsonShape, name, "", 0,
               "words: expected an object of words, got no such key");
    } else if (!words->is_object()) {
      sink.add(DefectKind::kBadJsonType, name, "", 0,
               "words: expected an object of words, got " + describe(*words));
    } else {
      for (const auto& [id, word] : words->items()) {
        read_word(name, id, word, ignore_tags, &image, sink);
      }
    }
    result->images.push_back(std::move(image));
  }
}

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// Whole-field number; accepts what std::from_chars does (incl. nan, inf).
bool parse_number(std::string_view field, double* out) {
  field = trim(field);
  if (!field.empty() && field.front() == '+') field.remove_prefix(1);
  if (field.empty()) return false;
  const char* end = field.data() + field.size();
  const auto [ptr, ec] = std::from_chars(field.data(), end, *out);
  // Out-of-range values are huge, not malformed: from_chars leaves *out
  // untouched, so spell them as infinities for validate() to report.
  if (ec == std::errc::result_out_of_range && ptr == end) {
    *out = field.front() == '-' ? -HUGE_VAL : HUGE_VAL;
    return true;
  }
  return ec == std::errc() && ptr == end;
}

void read_icdar_line(std::string_view line, int line_no,
                     const std::string& image_file, ImageAnnotation* image,
                     DefectSink& sink) {
  const std::string id = std::to_string(line_no);
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (fields.size() < 8) {
    const size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) break;
    fields.push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
  std::string_view transcription = line.substr(start);
  if (fields.size() == 7) {
    // Exactly 8 fields: coordinates without a transcription.
    fields.push_back(transcription);
    transcription = {};
  }
  if (fields.size() < 8) {
    sink.add(DefectKind::kBadIcdarLine, image_file, id, line_no,
             "expected x1,y1,x2,y2,x3,y3,x4,y4,transcription, got " +
                 std::to_string(fields.size() + 1) + " comma-separated " +
                 "fields in " + quoted(std::string(line)));
    return;
  }
  WordAnnotation w;
  w.id = id;
  w.line = line_no;
  double v[8];
  for (size_t i = 0; i < 8; ++i) {
    if (!parse_number(fields[i], &v[i])) {
      sink.add(DefectKind::kBadIcdarLine, image_file, id, line_no,
               "field " + std::to_string(i + 1) + ": expected a number, got " +
                   quoted(std::string(fields[i])));
      return;
    }
  }
  for (size_t i = 0; i < 8; i += 2) w.points.push_back({v[i], v[i + 1]});
  w.transcription = std::string(transcription);
  w.ignore = trim(transcription) == "###";
  image->words.push_back(std::move(w));
}

// Segments ab and cd cross at a single point interior to both.
bool proper_crossing(const Point& a, const Point& b, const Point& c,
                     const Point& d) {
  const auto orient = [](const Point& p, const Point& q, const Point& r) {
    const double v = (q.x - p.x) * (r.y - p.y) - (q.y - p.y) * (r.x - p.x);
    return (v > 0) - (v < 0);
  };
  return orient(a, b, c) * orient(a, b, d) < 0 &&
         orient(c, d, a) * orient(c, d, b) < 0;
}

// First pair of non-adjacent edges (i, j) that cross properly, or (-1, -1).
std::pair<int, int> find_self_intersection(const Polygon& poly) {
  const int n = static_cast<int>(poly.size());
  for (int i = 0; i < n; ++i) {
    for (int j = i + 2; j < n; ++j) {
      if (i == 0 && j == n - 1) continue;  // Adjacent through the closing edge.
      if (proper_crossing(poly[i], poly[(i + 1) % n], poly[j],
                          poly[(j + 1) % n])) {
        return {i, j};
      }
    }
  }
  return {-1, -1};
}

}  // namespace

std::string to_string(DefectKind kind) {
  switch (kind) {
    case DefectKind::kNonFiniteCoordinate:
      return "non_finite_coordinate";
    case DefectKind::kHugeCoordinate:
      return "huge_coordinate";
    case DefectKind::kTooFewPoints:
      return "too_few_points";
    case DefectKind::kZeroArea:
      return "zero_area";
    case DefectKind::kSelfIntersection:
      return "self_intersection";
    case DefectKind::kRepeatedVertex:
      return "repeated_vertex";
    case DefectKind::kOutOfImage:
      return "out_of_image";
    case DefectKind::kMissingImage:
      return "missing_image";
    case DefectKind::kUnreadableImage:
      return "unreadable_image";
    case DefectKind::kImageSizeMismatch:
      return "image_size_mismatch";
    case DefectKind::kBadJsonShape:
      return "bad_json_shape";
    case DefectKind::kBadJsonType:
      return "bad_json_type";
    case DefectKind::kBadIcdarLine:
      return "bad_icdar_line";
    case DefectKind::kUnreadableFile:
      return "unreadable_file";
    case DefectKind::kInvalidBatch:
      return "invalid_batch";
    case DefectKind::kDuplicateImage:
      return "duplicate_image";
    case DefectKind::kDuplicateKey:
      return "duplicate_key";
    case DefectKind::kOutsideDataset:
      return "outside_dataset";
  }
  return "unknown";
}

bool refuses_dataset(DefectKind kind) {
  return kind == DefectKind::kDuplicateImage || kind == DefectKind::kDuplicateKey ||
         kind == DefectKind::kOutsideDataset;
}

namespace {

std::string data_error_message(const std::vector<Defect>& defects) {
  if (defects.empty()) return "invalid annotation data";
  std::string m = defects.front().message;
  if (defects.size() > 1) {
    m += " (and " + std::to_string(defects.size() - 1) + " more defects)";
  }
  return m;
}

}  // namespace

DataError::DataError(std::vector<Defect> defects)
    : std::runtime_error(data_error_message(defects)),
      defects_(std::move(defects)) {}

ReadResult read_ufo_json(const std::string& path,
                         const std::vector<std::string>& ignore_tags) {
  ReadResult result;
  DefectSink sink(&result.defects, path);
  try {
    std::string text;
    std::string why;
    if (!read_bytes(path, &text, &why)) {
      sink.add(DefectKind::kUnreadableFile, "", "", 0, "expected a readable UFO JSON file, got " + why);
      return result;
    }
    json doc;
    try {
      doc = json::parse(text);
    } catch (const json::parse_error& e) {
      const auto [line, column] = line_column(text, e.byte);
      sink.add(DefectKind::kBadJsonShape, "", "", line,
               std::string("expected valid JSON, got: ") + e.what(), column);
      return result;
    } catch (const json::exception& e) {
      // Number overflow (1e400) and the like carry no position.
      sink.add(DefectKind::kBadJsonShape, "", "", 0,
               std::string("expected valid JSON, got: ") + e.what());
      return result;
    }
    const KeyScan keys = scan_keys(text);
    report_duplicate_keys(keys.duplicates, sink);
    read_ufo_document(doc, ignore_tags, &result, sink);
    for (auto& image : result.images) {
      if (const auto it = keys.image_lines.find(image.file); it != keys.image_lines.end()) image.line = it->second;
    }
  } catch (const std::exception& e) {
    sink.add(DefectKind::kUnreadableFile, "", "", 0,
             std::string("reading failed: ") + e.what());
  }
  return result;
}

ReadResult read_icdar_txt(const std::string& path,
                          const std::string& image_file) {
  ReadResult result;
  DefectSink sink(&result.defects, path);
  try {
    std::string text;
    if (std::string why; !read_bytes(path, &text, &why)) {
      sink.add(DefectKind::kUnreadableFile, image_file, "", 0, "expected a readable ICDAR text file, got " + why);
      return result;
    }
    std::string_view rest(text);
    if (rest.substr(0, 3) == "\xEF\xBB\xBF") rest.remove_prefix(3);
    ImageAnnotation image;
    image.file = image_file;
    int line_no = 0;
    while (!rest.empty()) {
      // A line ends at "\n", "\r\n" or a lone "\r" (old Mac editors): read
      // as one line, the words after a lone "\r" would silently become the
      // first word's transcription.
      const size_t nl = rest.find_first_of("\r\n");
      std::string_view line = rest.substr(0, nl);
      size_t next = nl == std::string_view::npos ? rest.size() : nl + 1;
      if (nl != std::string_view::npos && rest[nl] == '\r' && nl + 1 < rest.size() && rest[nl + 1] == '\n') ++next;
      rest = rest.substr(next);
      ++line_no;
      if (trim(line).empty()) continue;
      read_icdar_line(line, line_no, image_file, &image, sink);
    }
    result.images.push_back(std::move(image));
  } catch (const std::exception& e) {
    sink.add(DefectKind::kUnreadableFile, image_file, "", 0,
             std::string("reading failed: ") + e.what());
  }
  return result;
}

std::vector<Defect> validate(ImageAnnotation& image, OnInvalid policy,
                             const std::string& file) {
  std::vector<Defect> defects;
  DefectSink sink(&defects, file);
  const bool size_known = image.width > 0 && image.height > 0;
  std::vector<WordAnnotation> kept;
  kept.reserve(image.words.size());
  for (WordAnnotation& word : image.words) {
    const size_t before = defects.size();
    const auto add = [&](DefectKind kind, const std::string& what) {
      sink.add(kind, image.file, word.id, word.line, what);
    };
    const Polygon& pts = word.points;
    // Defects that clamping cannot repair.
    bool fatal = false;

    for (size_t i = 0; i < pts.size(); ++i) {
      if (!std::isfinite(pts[i].x) || !std::isfinite(pts[i].y)) {
        add(DefectKind::kNonFiniteCoordinate,
            "points[" + std::to_string(i) +
                "]: expected finite coordinates, got " + format_point(pts[i]));
        fatal = true;
        break;
      }
    }
    if (!fatal && pts.size() < 3) {
      add(DefectKind::kTooFewPoints,
          "expected at least 3 vertices, got " + std::to_string(pts.size()));
      fatal = true;
    }
    if (!fatal) {
      for (size_t i = 0; i < pts.size(); ++i) {
        if (std::fabs(pts[i].x) > kHugeCoordinate ||
            std::fabs(pts[i].y) > kHugeCoordinate) {
          std::ostringstream what;
          what << "points[" << i
               << "]: expected |coordinate| <= " << static_cast<int64_t>(kHugeCoordinate) << ", got "
               << format_point(pts[i]);
          add(DefectKind::kHugeCoordinate, what.str());
          if (!size_known) fatal = true;
          break;
        }
      }
      if (size_known) {
        for (size_t i = 0; i < pts.size(); ++i) {
          const Point& p = pts[i];
          if (p.x < 0 || p.y < 0 || p.x > image.width || p.y > image.height) {
            add(DefectKind::kOutOfImage,
                "points[" + std::to_string(i) + "]: expected a vertex in [0, " +
                    std::to_string(image.width) + "] x [0, " +
                    std::to_string(image.height) + "], got " + format_point(p));
            break;
          }
        }
      }
      for (size_t i = 0; i < pts.size(); ++i) {
        const size_t j = (i + 1) % pts.size();
        if (pts[i].x == pts[j].x && pts[i].y == pts[j].y) {
          add(DefectKind::kRepeatedVertex,
              "points[" + std::to_string(j) + "]: expected a vertex distinct " +
                  "from points[" + std::to_string(i) + "], got " +
                  format_point(pts[j]) + " twice");
          break;
        }
      }
    }
    Polygon repaired;
    if (!fatal) {
      repaired = pts;
      if (policy == OnInvalid::kClip && size_known) {
        for (Point& p : repaired) {
          p.x = std::clamp(p.x, 0.0, static_cast<double>(image.width));
          p.y = std::clamp(p.y, 0.0, static_cast<double>(image.height));
        }
      }
      repaired = remove_duplicate_vertices(repaired, 0.0);
      const char* after = policy == OnInvalid::kClip && defects.size() > before
                              ? " after clamping"
                              : "";
      if (repaired.size() < 3) {
        add(DefectKind::kTooFewPoints, "expected at least 3 distinct vertices" +
                                           std::string(after) + ", got " +
                                           std::to_string(repaired.size()));
        fatal = true;
      } else if (const auto [i, j] = find_self_intersection(repaired); i >= 0) {
        add(DefectKind::kSelfIntersection,
            "expected a simple polygon, got edge " + std::to_string(i) +
                " crossing edge " + std::to_string(j) +
                (repaired.size() != pts.size()
                     ? " (after dropping repeated vertices)"
                     : ""));
        fatal = true;
      } else if (area(repaired) < kZeroAreaEps) {
        std::ostringstream what;
        what << "expected a polygon with area >= " << kZeroAreaEps << " px²"
             << after << ", got " << area(repaired);
        add(DefectKind::kZeroArea, what.str());
        fatal = true;
      }
    }

    const bool defective = defects.size() > before;
    switch (policy) {
      case OnInvalid::kError:
        kept.push_back(std::move(word));
        break;
      case OnInvalid::kSkip:
        if (!defective) kept.push_back(std::move(word));
        break;
      case OnInvalid::kClip:
        if (!fatal) {
          word.points = std::move(repaired);
          kept.push_back(std::move(word));
        }
        break;
    }
  }
  image.words = std::move(kept);
  return defects;
}

std::vector<Defect> check_image(ImageAnnotation& image,
                                const std::string& image_path,
                                const std::string& file, cv::Mat* decoded) {
  std::vector<Defect> defects;
  DefectSink sink(&defects, file);
  if (decoded != nullptr) *decoded = cv::Mat();
  try {
    if (const std::string what = describe_non_file(image_path); !what.empty()) {
      sink.add(DefectKind::kMissingImage, image.file, "", 0,
               "expected an image file at " + quoted(image_path) + ", got " + what);
      return defects;
    }
    // Spec §11 item 11: annotations refer to the stored pixel grid.
    DecodeFailure failure;
    cv::Mat img = decode_image(image_path, /*apply_exif=*/false, &failure);
    if (img.empty()) {
      sink.add(DefectKind::kUnreadableImage, image.file, "", 0,
               "expected " + failure.expected + " at " + quoted(image_path) +
                   ", got " + failure.got);
      return defects;
    }
    if (image.width <= 0 || image.height <= 0) {
      image.width = img.cols;
      image.height = img.rows;
    } else if (image.width != img.cols || image.height != img.rows) {
      sink.add(DefectKind::kImageSizeMismatch, image.file, "", 0,
               "expected a decoded size of " + std::to_string(image.width) +
                   "x" + std::to_string(image.height) +
                   " (img_w x img_h), got " + std::to_string(img.cols) + "x" +
                   std::to_string(img.rows));
    }
    if (decoded != nullptr) *decoded = std::move(img);
  } catch (const std::exception& e) {
    sink.add(DefectKind::kUnreadableImage, image.file, "", 0,
             "expected a decodable image at " + quoted(image_path) +
                 ", got an error: " + e.what());
  }
  return defects;
}

}  // namespace dbh::model
