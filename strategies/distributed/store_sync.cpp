#include "strategies/distributed/store_sync.h"

#include "core/text.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace parbench {

std::string format_seconds(std::chrono::milliseconds duration) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(duration.count()) / 1e3);
  return text;
}

std::string format_ranks(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + joined(ranks, ", ", [](int rank) { return std::to_string(rank); });
}

std::string first_line(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  const std::string message = c10_error ? c10_error->what_without_backtrace() : error.what();
  return message.substr(0, message.find('\n'));
}

namespace {
std::string& store_host_text() {
  static std::string text;
  return text;
}
}  // namespace

void set_store_host(const std::string& description) { store_host_text() = description; }
const std::string& store_host() { return store_host_text(); }

std::string store_did_not_answer(const std::string& what, const std::string& why) {
  const auto& host = store_host();
  return "the rendezvous store" + (host.empty() ? std::string() : " at " + host) + " did not answer while waiting to " +
         what + " (is its process stopped?): " + why;
}

void wait_for_ranks(c10d::Store& store, const std::string& prefix, int world_size, std::chrono::milliseconds timeout,
                    const std::string& what, const std::function<void(int rank)>& arrived) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  for (int rank = 0; rank < world_size; ++rank) {
    const auto left = std::max(std::chrono::milliseconds(1),
                               std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    try {
      store.wait({prefix + std::to_string(rank)}, left);
      // Inside the try: what `arrived` reads may find the store gone (its host rank failed).
      if (arrived) arrived(rank);
    } catch (const c10::DistStoreError&) {
      // Which ranks are missing, asked of the store: one that does not answer this either is
      // the one at fault (a stopped host), not the ranks.
      std::vector<int> missing;
      try {
        for (int other = rank; other < world_size; ++other) {
          if (!store.check({prefix + std::to_string(other)})) missing.push_back(other);
        }
      } catch (const std::exception& error) {
        throw std::runtime_error(store_did_not_answer(what, first_line(error)));
      }
      if (missing.empty()) missing.push_back(rank);  // it arrived just after the deadline
      throw std::runtime_error(format_ranks(missing) + " did not " + what + " within " + format_seconds(timeout));
    } catch (const c10::DistNetworkError& error) {
      throw std::runtime_error("lost the rendezvous store while waiting for ranks to " + what + ": " +
                               first_line(error));
    }
  }
}

void wait_for_rank(c10d::Store& store, const std::string& key, int rank, std::chrono::milliseconds timeout,
                   const std::string& what) {
  try {
    store.wait({key}, timeout);
  } catch (const c10::DistStoreError&) {
    try {
      store.check({key});
    } catch (const std::exception& error) {
      throw std::runtime_error(store_did_not_answer(what, first_line(error)));
    }
    throw std::runtime_error(format_ranks({rank}) + " did not " + what + " within " + format_seconds(timeout));
  } catch (const c10::DistNetworkError& error) {
    throw std::runtime_error("lost the rendezvous store while waiting for rank " + std::to_string(rank) + " to " +
                             what + ": " + first_line(error));
  }
}

void release_keys(c10d::Store& store, const std::string& counter, int readers, const std::vector<std::string>& keys) {
  if (store.add(counter, 1) < readers) return;
  for (const auto& key : keys) store.deleteKey(key);
  store.deleteKey(counter);
}

}  // namespace parbench
