// Shell quoting (harness/common/text) and the checks for files a user names
// for dbh to write (harness/common/out_file): every quoted word reads back
// exactly through a real shell, and no output path replaces what is not dbh's.
#include "harness/common/progress.h"
#include "harness/common/text.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "harness/common/error.h"
#include "harness/common/home.h"
#include "harness/common/out_file.h"
#include "tests/support/files.h"

namespace dbh::harness {
namespace {

namespace fs = std::filesystem;
using dbh::testing::fresh_dir;
using dbh::testing::read_text;
using dbh::testing::write_text;

// What `shell` prints for `printf FORMAT WORDS`, WORDS being the script text
// `words`: the arguments the shell reads back. "<failed>" when the shell did
// not run.
std::string shell_reads(const std::string& shell, const std::string& words, const std::string& format = "%s") {
  int fds[2];
  if (::pipe(fds) != 0) return "<failed>";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    const std::string script = "printf '" + format + "' " + words;
    ::execl(shell.c_str(), shell.c_str(), "-c", script.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? out : "<failed>";
}

const std::vector<std::string>& awkward_words() {
  static const std::vector<std::string> words = {
      "plain-name_1.yaml",
      "with space",
      "it's",
      "semi;colon && $(touch pwned) `x` $HOME *",
      "n\n::error file=evil::pwn.yaml",
      "tab\there\rcr",
      "back\\slash and 'quote' and !bang",
      "\x1b[31mred\x1b[0m",
      std::string("caf\xe9 not utf-8 \xff\xfe", 17),
      "c1 \xC2\x85 next-line, \xE2\x80\xA8 line separator",
      "rlo \xE2\x80\xAE fdp.exe, isolate \xE2\x81\xA6x\xE2\x81\xA9",
      "caf\xC3\xA9 \xE2\x9C\x85 utf-8",
      "\\x41 literally",
      "",
      "'",
      "\n",
  };
  return words;
}

TEST(ShellQuoteTest, LeavesPlainWordsAloneAndQuotesTheRest) {
  EXPECT_EQ(shell_quote("scenarios/ci-smoke.yaml"), "scenarios/ci-smoke.yaml");
  EXPECT_EQ(shell_quote("train.lr=0.1"), "train.lr=0.1");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("caf\xC3\xA9"), "'caf\xC3\xA9'");  // printable UTF-8 stays readable
  EXPECT_EQ(shell_quote("n\n::error x"), "$'n\\n::error x'");
  EXPECT_EQ(shell_quote("a\tb\\c'd"), "$'a\\tb\\\\c\\'d'");
  EXPECT_EQ(shell_quote(std::string("\xff", 1) + "\x01"), "$'\\xFF\\x01'");
  EXPECT_EQ(shell_quote("\xC2\x85"), "$'\\xC2\\x85'");
  EXPECT_EQ(shell_command({"dbh", "run", "a b.yaml", "x=1"}), "dbh run 'a b.yaml' x=1");
}

TEST(OneLineTest, ControlSeparatorAndBidiCharactersBecomeSpaces) {
  EXPECT_EQ(one_line("a\nb\tc"), "a b c");
  EXPECT_EQ(one_line("c1 \xC2\x85."), "c1  .");
  EXPECT_EQ(one_line("rlo \xE2\x80\xAE gnp.exe"), "rlo   gnp.exe");  // U+202E
  EXPECT_EQ(one_line("\xE2\x81\xA6x\xE2\x81\xA9"), " x ");            // U+2066, U+2069
  EXPECT_EQ(one_line("caf\xC3\xA9 \xE2\x9C\x85"), "caf\xC3\xA9 \xE2\x9C\x85");  // printable UTF-8 stays
}

TEST(ProgressTextTest, SaysHowFarAndHowLongIsLeft) {
  EXPECT_EQ(progress_text("dbh data check: decoding the images of /d", "images", 250, 1000, 10.2),
            "dbh data check: decoding the images of /d: 250/1000 images, 10 s, about 31 s left");
  // Nothing done yet: no estimate; all done: none either.
  EXPECT_EQ(progress_text("scan", "", 0, 10, 3.0), "scan: 0/10, 3 s");
  EXPECT_EQ(progress_text("scan", "files", 10, 10, 3.0), "scan: 10/10 files, 3 s");
  EXPECT_EQ(progress_text("a\nb", "", 1, 2, 1.0), "a b: 1/2, 1 s, about 1 s left");
}

TEST(LastLineTest, SkipsBlankLinesAtTheEnd) {
  EXPECT_EQ(last_line("first\ndbh: internal error: Invalid device argument \n\n  \n"),
            "dbh: internal error: Invalid device argument ");
  EXPECT_EQ(last_line("only"), "only");
  EXPECT_EQ(last_line("\n \n\t"), "");
  EXPECT_EQ(last_line(""), "");
  EXPECT_EQ(last_line(std::string(1000, 'x')).size(), 300u);
}

TEST(ShellQuoteTest, IsOneLineOfValidUtf8WithoutControlCharacters) {
  for (const auto& w : awkward_words()) {
    const std::string q = shell_quote(w);
    EXPECT_EQ(q, one_line(q)) << "a control character or line break in " << q;
    EXPECT_EQ(q, valid_utf8(q)) << q;
  }
}

TEST(ShellQuoteTest, BashReadsEveryWordBackExactly) {
  if (::access("/bin/bash", X_OK) != 0) GTEST_SKIP() << "no /bin/bash";
  for (const auto& w : awkward_words()) {
    EXPECT_EQ(shell_reads("/bin/bash", shell_quote(w)), w) << shell_quote(w);
  }
  // A whole command: each word arrives as one argument.
  const std::string cmd = shell_command({"n\n::error file=evil::pwn.yaml", "x y"});
  EXPECT_EQ(shell_reads("/bin/bash", cmd, "<%s>"), "<n\n::error file=evil::pwn.yaml><x y>");
}

TEST(ShellQuoteTest, PosixQuotingReadsBackExactlyInAPosixShell) {
  for (const auto& w : awkward_words()) {
    const std::string q = shell_quote_posix(w);
    EXPECT_EQ(q.find("$'"), std::string::npos) << q;
    EXPECT_EQ(shell_reads("/bin/sh", q), w) << q;
  }
}

TEST(OutputFileTest, AcceptsANewFileAndRefusesWhatIsNotDbhs) {
  const fs::path dir = fresh_dir("dbh-out-file");
  const OutputFileRule rule{"dbh run", "--junit",
                            [](const std::string& p) { return read_text(p) == "written by dbh"; },
                            "a JUnit file dbh wrote", ""};
  const auto refusal = [&](const fs::path& p) -> std::string {
    try {
      check_output_file(p.string(), rule);
      return "";
    } catch (const UsageError& e) {
      return e.what();
    }
  };
  EXPECT_EQ(refusal(dir / "new.xml"), "");
  write_text(dir / "mine.xml", "written by dbh");
  EXPECT_EQ(refusal(dir / "mine.xml"), "");
  write_text(dir / "user.txt", "the user's");
  EXPECT_EQ(refusal(dir / "user.txt"),
            "dbh run: --junit: expected a new file or a JUnit file dbh wrote, got a regular file that is not a "
            "JUnit file dbh wrote (" + (dir / "user.txt").string() + ")");
  fs::create_symlink(dir / "mine.xml", dir / "link.xml");  // even to a file dbh wrote
  EXPECT_NE(refusal(dir / "link.xml").find("got a symbolic link"), std::string::npos);
  fs::create_symlink(dir / "gone", dir / "dangling.xml");
  EXPECT_NE(refusal(dir / "dangling.xml").find("got a symbolic link"), std::string::npos);
  EXPECT_NE(refusal(dir).find("got a directory"), std::string::npos);
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  EXPECT_NE(refusal(dir / "fifo").find("got a FIFO"), std::string::npos);
  EXPECT_NE(refusal("/dev/null").find("got a character device"), std::string::npos);
  EXPECT_NE(refusal(dir / "no" / "such" / "x.xml").find("--junit: expected a file in an existing folder"),
            std::string::npos);
  EXPECT_NE(refusal(dir / "user.txt" / "x.xml").find("--junit: expected"), std::string::npos);
  EXPECT_EQ(read_text(dir / "user.txt"), "the user's");
  // Without a replace rule nothing existing is accepted; the hint is shown
  // only where it helps.
  const OutputFileRule strict{"scenario from-command", "--out", nullptr, "", "(or --force to replace it)"};
  try {
    check_output_file((dir / "mine.xml").string(), strict);
    ADD_FAILURE() << "replaced an existing file";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--out: expected a new file (or --force to replace it), got a regular file"),
              std::string::npos)
        << e.what();
  }
  try {
    check_output_file((dir / "fifo").string(), strict);
    ADD_FAILURE() << "accepted a FIFO";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).find("--force"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(OutputFileTest, RecognisesFilesByHeadAndTailAndPathsByFolder) {
  const fs::path dir = fresh_dir("dbh-out-file");
  write_text(dir / "a.xml", "<head>middle</tail>\n");
  EXPECT_TRUE(file_has_head_and_tail((dir / "a.xml").string(), "<head>", "</tail>\n"));
  EXPECT_FALSE(file_has_head_and_tail((dir / "a.xml").string(), "<head>", "</other>\n"));
  EXPECT_FALSE(file_has_head_and_tail((dir / "a.xml").string(), "<head>middle</tail>\n", "</tail>\n"));
  fs::create_symlink(dir / "a.xml", dir / "l.xml");
  EXPECT_FALSE(file_has_head_and_tail((dir / "l.xml").string(), "<head>", "</tail>\n")) << "followed a link";
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
  EXPECT_FALSE(file_has_head_and_tail((dir / "fifo").string(), "", ""));  // returns: never blocks
  EXPECT_FALSE(file_has_head_and_tail((dir / "none").string(), "", ""));

  fs::create_directories(dir / "out");
  fs::create_symlink(dir / "out", dir / "out-link");
  EXPECT_TRUE(path_within((dir / "out" / "report.json").string(), (dir / "out").string()));
  EXPECT_TRUE(path_within((dir / "out").string(), (dir / "out/").string()));
  EXPECT_TRUE(path_within((dir / "out" / "new" / "x.xml").string(), (dir / "out").string()));
  EXPECT_TRUE(path_within((dir / "out-link" / "x.xml").string(), (dir / "out").string()));
  EXPECT_TRUE(path_within((dir / "x" / ".." / "out" / "x.xml").string(), (dir / "out").string()));
  EXPECT_FALSE(path_within((dir / "out.xml").string(), (dir / "out").string()));
  EXPECT_FALSE(path_within((dir / "other" / "x.xml").string(), (dir / "out").string()));
  EXPECT_TRUE(same_file((dir / "l.xml").string(), (dir / "a.xml").string()));
  EXPECT_FALSE(same_file((dir / "none").string(), (dir / "none").string()));
  fs::remove_all(dir);
}

TEST(OutputFileTest, DefaultOutputFoldersAreUniquePerProcessAndSafeNames) {
  const std::string a = default_output_folder("bisect-steps-seed 002/../x");
  const std::filesystem::path p(a);
  EXPECT_EQ(p.parent_path(), std::filesystem::path("reports") / "runs");
  const std::string name = p.filename().string();
  EXPECT_EQ(name.find('/'), std::string::npos) << name;
  EXPECT_EQ(name.rfind("bisect-steps-seed", 0), 0u) << name;
  // <label>-<YYYYmmdd-HHMMSS>-<pid>: the pid keeps two commands of one second apart.
  const std::string pid = "-" + std::to_string(::getpid());
  ASSERT_GT(name.size(), pid.size() + 16);
  EXPECT_EQ(name.substr(name.size() - pid.size()), pid) << name;
}

// The probe cache without --cache: one absolute place, the per-user cache
// folder; never the working directory by accident.
TEST(OutputFileTest, TheDefaultProbeCacheIsTheUserCacheFolder) {
  const char* saved = std::getenv(kCacheDirEnv);
  const std::string keep = saved != nullptr ? saved : "";
  ::setenv(kCacheDirEnv, "/tmp/dbh-cache-test", 1);
  EXPECT_EQ(default_probe_cache(), "/tmp/dbh-cache-test/probes");
  ::unsetenv(kCacheDirEnv);
  const std::string p = default_probe_cache();
  EXPECT_TRUE(std::filesystem::path(p).is_absolute()) << p;
  EXPECT_EQ(std::filesystem::path(p).filename(), "probes") << p;
  if (saved != nullptr) ::setenv(kCacheDirEnv, keep.c_str(), 1);
}

}  // namespace
}  // namespace dbh::harness
