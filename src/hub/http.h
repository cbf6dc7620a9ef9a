// A small libcurl client for the hub: one request at a time, response headers collected by name
// (lower case), bodies either kept in memory (API answers, small) or streamed to a callback
// (downloads). Redirects are never followed automatically: the hub client decides (a relative
// redirect is a renamed repository and keeps the token; an absolute one is the storage host and
// gets no token). Transport failures are reported in the response, not thrown, so that callers can
// retry with backoff.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace vkf::hub {

struct HttpResponse {
  long status = 0;                             // 0 when no response arrived
  std::map<std::string, std::string> headers;  // lower-case names; of the last response
  std::string body;                            // when no sink was given
  std::string transport_error;                 // "" when the exchange completed
  bool partial = false;                        // the body ended before its announced length
  bool no_connection = false;                  // the host could not be resolved or connected to
  std::string header(const std::string& name) const;
};

struct HttpRequest {
  std::string method = "GET";  // GET or HEAD
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  long connect_timeout_s = 10;
  long stall_timeout_s = 10;  // abort when less than 1 byte/s arrives for this long
  // Receives the body in pieces when set (only for 2xx answers; `head` holds the status and headers
  // so far); returns false to abort.
  std::function<bool(const HttpResponse& head, const char*, size_t)> sink;
};

HttpResponse http_request(const HttpRequest& request);

// Resolves `location` (absolute, or relative as RFC 7231 allows) against `base`.
std::string resolve_url(const std::string& base, const std::string& location);
// The scheme://host:port part of a URL.
std::string url_origin(const std::string& url);

}  // namespace vkf::hub
