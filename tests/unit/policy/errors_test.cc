// The error table: every code's status and a JSON body that parses; JsonEscape.
#include "proxy/policy/errors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

namespace idemgate {
namespace {

// A minimal JSON reader for flat objects of strings: enough to prove the body is valid JSON.
bool ParseFlatJsonObject(const std::string& s, std::map<std::string, std::string>* out) {
  size_t i = 0;
  auto ws = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  };
  auto str = [&](std::string* v) {
    if (i >= s.size() || s[i] != '"') return false;
    ++i;
    while (i < s.size() && s[i] != '"') {
      unsigned char c = static_cast<unsigned char>(s[i]);
      if (c < 0x20) return false;
      if (c == '\\') {
        if (++i >= s.size()) return false;
        char e = s[i];
        if (e == 'u') {
          if (i + 4 >= s.size()) return false;
          v->push_back(static_cast<char>(std::stoi(s.substr(i + 1, 4), nullptr, 16)));
          i += 4;
        } else if (std::strchr("\"\\/", e)) {
          v->push_back(e);
        } else if (std::strchr("bfnrt", e)) {
          v->push_back('?');
        } else {
          return false;
        }
      } else {
        v->push_back(s[i]);
      }
      ++i;
    }
    if (i >= s.size()) return false;
    ++i;
    return true;
  };
  ws();
  if (i >= s.size() || s[i++] != '{') return false;
  while (true) {
    ws();
    std::string k, v;
    if (!str(&k)) return false;
    ws();
    if (i >= s.size() || s[i++] != ':') return false;
    ws();
    if (!str(&v)) return false;
    (*out)[k] = v;
    ws();
    if (i < s.size() && s[i] == ',') {
      ++i;
      continue;
    }
    if (i < s.size() && s[i] == '}') {
      ++i;
      break;
    }
    return false;
  }
  ws();
  return i == s.size();
}

struct Row {
  ErrorCode code;
  int status;
  const char* name;
};

constexpr Row kRows[] = {
    {ErrorCode::kBadRequest, 400, "bad_request"},
    {ErrorCode::kMissingCredentials, 401, "missing_credentials"},
    {ErrorCode::kIdempotencyKeyMissing, 400, "idempotency_key_missing"},
    {ErrorCode::kIdempotencyKeyInvalid, 400, "idempotency_key_invalid"},
    {ErrorCode::kRequestTimeout, 408, "request_timeout"},
    {ErrorCode::kIdempotencyKeyInUse, 409, "idempotency_key_in_use"},
    {ErrorCode::kRequestTooLarge, 413, "request_too_large"},
    {ErrorCode::kIdempotencyKeyReused, 422, "idempotency_key_reused"},
    {ErrorCode::kHeadersTooLarge, 431, "headers_too_large"},
    {ErrorCode::kUpstreamUnavailable, 502, "upstream_unavailable"},
    {ErrorCode::kUpstreamFailed, 502, "upstream_failed"},
    {ErrorCode::kStoreUnavailable, 503, "store_unavailable"},
    {ErrorCode::kUpstreamTimeout, 504, "upstream_timeout"},
};

TEST(Errors, EveryCodeHasItsStatusAndAValidJsonBody) {
  for (const Row& row : kRows) {
    const ErrorInfo& info = GetErrorInfo(row.code);
    EXPECT_EQ(info.status, row.status) << row.name;
    EXPECT_STREQ(info.code, row.name);
    EXPECT_GT(std::strlen(info.reason), 0u) << row.name;
    std::string detail = info.default_detail;
    EXPECT_EQ(detail.back(), '.') << row.name;
    StoredResponse r = MakeErrorResponse(row.code);
    EXPECT_EQ(r.status, row.status);
    EXPECT_EQ(r.reason, info.reason);
    ASSERT_EQ(r.headers.size(), 1u);
    EXPECT_EQ(r.headers[0].first, "Content-Type");
    EXPECT_EQ(r.headers[0].second, "application/json");
    std::map<std::string, std::string> json;
    ASSERT_TRUE(ParseFlatJsonObject(r.body, &json)) << r.body;
    EXPECT_EQ(json.size(), 2u);
    EXPECT_EQ(json["error"], row.name);
    EXPECT_EQ(json["detail"], detail);
  }
}

TEST(Errors, SpecExampleBodyIsExact) {
  StoredResponse r = MakeErrorResponse(
      ErrorCode::kIdempotencyKeyReused,
      "Idempotency-Key \"order-1001\" was already used for a different request (fingerprint "
      "ff330e75a93099c4, got 90f56163d6f6ee6b)");
  EXPECT_EQ(r.status, 422);
  EXPECT_EQ(r.reason, "Unprocessable Entity");
  EXPECT_EQ(r.body,
            "{\"error\":\"idempotency_key_reused\",\"detail\":\"Idempotency-Key \\\"order-1001\\\" "
            "was already used for a different request (fingerprint ff330e75a93099c4, got "
            "90f56163d6f6ee6b)\"}");
}

TEST(Errors, DetailWithAwkwardBytesStaysValidJson) {
  std::string detail = "quote \" back \\ newline \n nul " + std::string(1, '\0') + " caf\xc3\xa9";
  StoredResponse r = MakeErrorResponse(ErrorCode::kBadRequest, detail);
  std::map<std::string, std::string> json;
  ASSERT_TRUE(ParseFlatJsonObject(r.body, &json)) << r.body;
  EXPECT_EQ(json["detail"], detail);
}

TEST(Errors, JsonEscape) {
  EXPECT_EQ(JsonEscape("plain"), "plain");
  EXPECT_EQ(JsonEscape("a\"b"), "a\\\"b");
  EXPECT_EQ(JsonEscape("a\\b"), "a\\\\b");
  EXPECT_EQ(JsonEscape("\n\t\x1f"), "\\u000a\\u0009\\u001f");
  EXPECT_EQ(JsonEscape(std::string(1, '\0')), "\\u0000");
  EXPECT_EQ(JsonEscape("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");
  EXPECT_EQ(JsonEscape("/"), "/");
}

}  // namespace
}  // namespace idemgate
