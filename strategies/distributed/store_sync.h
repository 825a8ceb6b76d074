// Rank-to-rank waits through a c10d Store (a TCPStore across processes). Every wait has a
// deadline, and a wait that runs out names the ranks it was waiting for.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace parbench {

// "3 s", "0.5 s": a timeout as messages print it.
std::string format_seconds(std::chrono::milliseconds duration);

// "rank 1", "ranks 1, 3".
std::string format_ranks(const std::vector<int>& ranks);

// The first line of an exception's message, without c10's appended C++ backtrace.
std::string first_line(const std::exception& error);

// Where this process's rendezvous store is and who hosts it, for messages: "127.0.0.1:29500
// (hosted by rank 0)". Set once the store is known (World); "" before.
void set_store_host(const std::string& description);
const std::string& store_host();

// The message for a store that did not answer while waiting to `what`: its host is stopped,
// starved or gone, so the ranks were waiting for it, not for each other.
std::string store_did_not_answer(const std::string& what, const std::string& why);

// Waits until every rank in [0, world_size) has set `prefix + <rank>`, calling `arrived(rank)`
// as each key is found, in rank order. Throws std::runtime_error "rank 1 did not <what>
// within 3 s" naming every missing rank, or saying that the store itself was lost.
void wait_for_ranks(c10d::Store& store, const std::string& prefix, int world_size, std::chrono::milliseconds timeout,
                    const std::string& what, const std::function<void(int rank)>& arrived = nullptr);

// Waits for one key that `rank` sets; throws like wait_for_ranks.
void wait_for_rank(c10d::Store& store, const std::string& key, int rank, std::chrono::milliseconds timeout,
                   const std::string& what);

// Counts the calling rank as done with one exchange's keys; the last of `readers` ranks to
// call deletes `keys` and the counter, so a long run does not grow the store.
void release_keys(c10d::Store& store, const std::string& counter, int readers, const std::vector<std::string>& keys);

}  // namespace parbench
