// markdown_text: dbh's sentences around values it did not choose, as one
// line of Markdown whose code spans stay and whose other markup is escaped.
#include <gtest/gtest.h>

#include "harness/report/markdown_text.h"

namespace dbh::harness {
namespace {

using report::markdown_text;

TEST(MarkdownTextTest, KeepsCodeSpansAndEscapesMarkupOutsideThem) {
  EXPECT_EQ(markdown_text("flagged `decoder.fuse_1` at step 3"), "flagged `decoder.fuse_1` at step 3");
  EXPECT_EQ(markdown_text("error event: \"[click](javascript:x)\""), "error event: \"\\[click\\]\\(javascript:x)\"");
  EXPECT_EQ(markdown_text("a <script> and *b* and img_1.png | d # e"),
            "a \\<script\\> and *b* and img_1.png \\| d \\# e");
  EXPECT_EQ(markdown_text("# heading"), "\\# heading");
  EXPECT_EQ(markdown_text("``a ` b`` then [x]"), "``a ` b`` then \\[x\\]");
}

TEST(MarkdownTextTest, ABacktickThatOpensNoSpanIsEscaped) {
  EXPECT_EQ(markdown_text("it's a` ![t](https://e.x/t.png)"), "it's a\\` !\\[t\\]\\(https://e.x/t.png)");
}

TEST(MarkdownTextTest, IsOneLine) {
  EXPECT_EQ(markdown_text("boom\n# <script>\n::error::x").find('\n'), std::string::npos);
  EXPECT_EQ(markdown_text("boom\n# heading").rfind("# ", 0), std::string::npos);
}

}  // namespace
}  // namespace dbh::harness
