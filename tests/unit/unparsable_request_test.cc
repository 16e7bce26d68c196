// The reason given for a request gRPC could not decode: which string field is not UTF-8,
// found by walking the wire bytes, and the same UTF-8 verdict as protobuf's own parser.
#include "server/api/unparsable_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "stoke/v1/coordinator.pb.h"
#include "stoke/v1/worker_link.pb.h"

namespace stoke::server {
namespace {

// `message` encoded with the string `marker` it holds replaced by `bytes` (same length).
std::string Replaced(const google::protobuf::Message& message, const std::string& marker,
                     const std::string& bytes) {
  std::string wire = message.SerializeAsString();
  wire.replace(wire.find(marker), marker.size(), bytes);
  return wire;
}

TEST(UnparsableRequest, Utf8VerdictMatchesProtobufsParser) {
  const std::vector<std::string> texts = {
      "",
      "plain",
      "\xc3\xa9",
      "\xe2\x82\xac",
      "\xf0\x90\x8d\x88",
      "\xf4\x8f\xbf\xbf",
      "\xed\x9f\xbf",  // U+D7FF, the last before the surrogates
      "\x80",          // a continuation byte alone
      "\xc0\xaf",      // overlong "/"
      "\xc1\xbf",
      "\xe0\x80\xaf",
      "\xf0\x80\x80\xaf",  // more overlong forms
      "\xed\xa0\x80",      // a surrogate
      "\xf4\x90\x80\x80",  // past U+10FFFF
      "\xf5\x80\x80\x80",
      "\xff",
      "\xfe",
      "\xc3",
      "\xe2\x82",
      "ok\xf0\x90\x8d",  // cut short
      "\xe2\x28\xa1",    // a second byte that is no continuation
  };
  for (const std::string& text : texts) {
    v1::GetJobRequest request;
    request.set_id(std::string(text.size(), 'm'));
    const std::string wire = Replaced(request, std::string(text.size(), 'm'), text);
    v1::GetJobRequest parsed;
    const bool protobuf_accepts = text.empty() || parsed.ParseFromString(wire);
    EXPECT_EQ(IsValidUtf8(text), protobuf_accepts) << testing::PrintToString(text);
    EXPECT_EQ(FindInvalidUtf8(*v1::GetJobRequest::descriptor(), wire), protobuf_accepts ? "" : "id")
        << testing::PrintToString(text);
  }
}

TEST(UnparsableRequest, NamesTheNestedPathWithListIndices) {
  v1::ListJobsResponse response;
  response.add_jobs()->mutable_spec()->set_name("first");
  v1::Job* second = response.add_jobs();
  second->set_id("2");
  second->mutable_spec()->mutable_data()->mutable_tokens()->set_train_path("/data/MARKER");
  const std::string wire = Replaced(response, "MARKER", "MA\xff\xfeRK");
  EXPECT_EQ(FindInvalidUtf8(*v1::ListJobsResponse::descriptor(), wire),
            "jobs[1].spec.data.tokens.train_path");
  EXPECT_EQ(DescribeUnparsable(*v1::ListJobsResponse::descriptor(), wire),
            "jobs[1].spec.data.tokens.train_path: not valid UTF-8");
}

TEST(UnparsableRequest, NamesAFieldOfTheWorkerLink) {
  v1::WorkerMessage message;
  message.mutable_register_()->set_worker_id("w");
  message.mutable_register_()->mutable_device()->set_uuid("MARKER");
  EXPECT_EQ(DescribeUnparsable(*v1::WorkerMessage::descriptor(),
                               Replaced(message, "MARKER", "\xed\xa0\x80\x41\x42\x43")),
            "register.device.uuid: not valid UTF-8");
}

TEST(UnparsableRequest, BytesFieldsAndUnknownFieldsAreNotChecked) {
  v1::FileChunk chunk;  // data is `bytes`: anything goes
  chunk.set_data(std::string("\xff\xfe\x80", 3));
  EXPECT_EQ(FindInvalidUtf8(*v1::FileChunk::descriptor(), chunk.SerializeAsString()), "");
  // Field 99 is none of GetJobRequest's: protobuf keeps it as bytes.
  const std::string unknown = std::string("\x9a\x06\x02\xff\xfe", 5);
  v1::GetJobRequest parsed;
  EXPECT_TRUE(parsed.ParseFromString(unknown));
  EXPECT_EQ(FindInvalidUtf8(*v1::GetJobRequest::descriptor(), unknown), "");
}

TEST(UnparsableRequest, MalformedBytesAreSaidToBeNoEncodingOfTheRequest) {
  for (const std::string& wire : {std::string("\x0a\x7f\x31", 3),  // longer than what follows
                                  std::string("\x0a", 1),          // a tag without its value
                                  std::string("\x00\x01", 2),      // field number 0
                                  std::string("\x0b\x0a\x01", 3),  // a group that never ends
                                  std::string("\x0f", 1),          // wire type 7
                                  std::string(12, '\xff')}) {      // a varint past 64 bits
    EXPECT_EQ(FindInvalidUtf8(*v1::SubmitJobRequest::descriptor(), wire), "");
    EXPECT_EQ(DescribeUnparsable(*v1::SubmitJobRequest::descriptor(), wire),
              "request: not a valid encoding of stoke.v1.SubmitJobRequest");
  }
}

TEST(UnparsableRequest, DeepNestingStopsTheWalkWithoutExhaustingTheStack) {
  // Groups opened inside groups, far deeper than protobuf's parser (100) goes.
  const std::string wire(1 << 20, '\x0b');
  EXPECT_EQ(DescribeUnparsable(*v1::Job::descriptor(), wire),
            "request: not a valid encoding of stoke.v1.Job");
}

}  // namespace
}  // namespace stoke::server
