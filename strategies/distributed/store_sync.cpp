#include "strategies/distributed/store_sync.h"

#include "core/text.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <thread>

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

namespace {

using Clock = std::chrono::steady_clock;

// How often a watched wait looks for a departure, and the longest pause between its looks for the
// key it waits for.
constexpr std::chrono::milliseconds kDepartureLookEvery{250};
constexpr std::chrono::microseconds kLongestPause{50000};
const std::string kDeparturePrefix = "parbench_departed/";

struct Departures {
  std::mutex mutex;
  c10::intrusive_ptr<c10d::Store> store;
  int rank = -1;
  bool watched = false;
};

// Never destroyed: the exit handler that reads it runs among the static destructors.
Departures& departures() {
  static auto* state = new Departures;
  return *state;
}

// The store under every prefix: departures are recorded at its root, so that the waits of the
// store backend ("store_backend/") and of the world ("parbench/") find them alike.
c10::intrusive_ptr<c10d::Store> root_of(c10d::Store& store) {
  if (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(&store)) return prefixed->getUnderlyingNonPrefixStore();
  return c10::intrusive_ptr<c10d::Store>::reclaim_copy(&store);
}

// store.wait for `key`, set by `rank`, until `deadline`: at once where departures are not
// watched. Otherwise polled, so that a departure of `rank` is looked for every 0.25 s and thrown
// as its message (TCPStore's timed waits, cut into slices, would print c10d's warning at the end
// of each): checks back to back at first, then paused for at most a twentieth of a second.
void wait_until(c10d::Store& store, const std::string& key, int rank, Clock::time_point deadline) {
  const auto left = [&deadline] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  if (!departures_watched()) return store.wait({key}, left());
  std::chrono::microseconds pause{10};
  auto next_look = Clock::now() + kDepartureLookEvery;
  while (!store.check({key})) {
    const auto now = Clock::now();
    // At the deadline, a wait that times out as an unwatched one does (DistStoreError).
    if (now >= deadline) return store.wait({key}, std::chrono::milliseconds(1));
    if (now >= next_look) {
      const auto departed = departure_of(store, rank);
      if (!departed.empty()) throw std::runtime_error(departed);
      next_look = now + kDepartureLookEvery;
    }
    std::this_thread::sleep_for(std::min<std::chrono::microseconds>(pause, left()));
    pause = std::min(kLongestPause, pause * 3 / 2 + std::chrono::microseconds(1));
  }
}

}  // namespace

void set_departure_store(c10::intrusive_ptr<c10d::Store> store, int rank) {
  auto& state = departures();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.store = std::move(store);
  state.rank = rank;
}

void clear_departure_store() {
  auto& state = departures();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.store.reset();
  state.rank = -1;
}

void watch_departures() {
  auto& state = departures();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.watched = true;
}

bool departures_watched() {
  auto& state = departures();
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.watched;
}

void announce_departure(int status) noexcept {
  auto& state = departures();
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.store) return;
  try {
    // A connection of its own: the main thread may have been inside a call on the shared one.
    const auto store = root_of(*state.store)->clone();
    store->set(kDeparturePrefix + std::to_string(state.rank), std::to_string(status));
  } catch (...) {
    // The store is gone (its host ended): the peers lose it too, and say so.
  }
}

std::string departure_of(c10d::Store& store, int rank) {
  const auto root = root_of(store);
  const auto key = kDeparturePrefix + std::to_string(rank);
  if (!root->check({key})) return "";
  return "rank " + std::to_string(rank) + " exited early (status " + root->get_to_str(key) + ") before the case finished";
}

void wait_for_ranks(c10d::Store& store, const std::string& prefix, int world_size, std::chrono::milliseconds timeout,
                    const std::string& what, const std::function<void(int rank)>& arrived) {
  const auto deadline = Clock::now() + timeout;
  for (int rank = 0; rank < world_size; ++rank) {
    try {
      wait_until(store, prefix + std::to_string(rank), rank, deadline);
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
    wait_until(store, key, rank, Clock::now() + timeout);
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
