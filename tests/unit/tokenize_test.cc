// `stoke tokenize`'s byte tokenizer: it reads a regular file and nothing else, so that a
// folder named by mistake is an error naming it, not "wrote 0 tokens".
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "formats/token_file.h"
#include "tests/support/temp_dir.h"

namespace stoke::data {
namespace {

TEST(TokenizeBytes, AFolderOrFifoIsRefusedNamingIt) {
  testing::TempDir dir;
  const std::string fifo = dir.File("text.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& input : {dir.path(), fifo}) {
    auto tokens = TokenizeBytes(input, dir.File("out.bin"));
    ASSERT_FALSE(tokens.ok()) << input;
    EXPECT_EQ(tokens.status().message().rfind(input + ": cannot open: not a regular file", 0), 0u)
        << tokens.status();
  }
}

TEST(TokenizeBytes, ATextFileBecomesOneTokenPerByte) {
  testing::TempDir dir;
  std::ofstream(dir.File("text.txt")) << "hello";
  auto tokens = TokenizeBytes(dir.File("text.txt"), dir.File("out.bin"));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, 5);
}

}  // namespace
}  // namespace stoke::data
