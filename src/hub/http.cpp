// libcurl requests (see http.h).
#include "hub/http.h"

#include <curl/curl.h>

#include <cctype>
#include <mutex>

#include "vk/error.h"

namespace vkf::hub {
namespace {

struct Exchange {
  const HttpRequest* req;
  HttpResponse* resp;
  bool aborted = false;
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a 100 Continue, say): start over
    x->resp->headers.clear();
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front()))) value.erase(value.begin());
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
    x->resp->headers[name] = value;
  }
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  if (x->req->sink) {
    if (!x->req->sink(*x->resp, data, size * n)) {
      x->aborted = true;
      return 0;
    }
  } else {
    x->resp->body.append(data, size * n);
  }
  return size * n;
}

}  // namespace

std::string HttpResponse::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

HttpResponse http_request(const HttpRequest& req) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  HttpResponse resp;
  Exchange x{&req, &resp};
  CURL* curl = curl_easy_init();
  VKF_REQUIRE(curl, "libcurl could not start a request");
  curl_slist* headers = nullptr;
  for (const auto& h : req.headers) headers = curl_slist_append(headers, h.c_str());
  curl_easy_setopt(curl, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "vkformer (hub client; libcurl)");
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, req.connect_timeout_s);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, req.stall_timeout_s);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &x);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &x);
  if (req.method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  // Non-2xx bodies are short error descriptions: keep them in memory, not in the download.
  const auto sink = req.sink;
  HttpRequest local = req;
  if (sink) {
    local.sink = [&](const HttpResponse&, const char* d, size_t n) {
      curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp.status);
      if (resp.status >= 200 && resp.status < 300) return sink(resp, d, n);
      resp.body.append(d, n);
      return true;
    };
    x.req = &local;
  }
  const CURLcode rc = curl_easy_perform(curl);
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp.status);
  if (rc != CURLE_OK && !x.aborted) {
    resp.transport_error = curl_easy_strerror(rc);
    resp.partial = rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_OPERATION_TIMEDOUT;
    resp.no_connection = rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_PROXY;
  } else if (x.aborted) {
    resp.transport_error = "aborted";
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return resp;
}

std::string url_origin(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return "";
  const size_t path = url.find('/', scheme + 3);
  return url.substr(0, path);
}

std::string resolve_url(const std::string& base, const std::string& location) {
  if (location.find("://") != std::string::npos) return location;
  if (location.rfind("//", 0) == 0) return base.substr(0, base.find("://") + 1) + location;
  if (!location.empty() && location.front() == '/') return url_origin(base) + location;
  const size_t last = base.rfind('/');
  return base.substr(0, last + 1) + location;
}

}  // namespace vkf::hub
