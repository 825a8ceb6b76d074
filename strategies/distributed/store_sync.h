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

// ---- A rank that ends early under an external launcher --------------------------------------
// Only the launcher sees a rank's exit status. So a rank of an external launcher whose process
// ends while its world has not been left together (status 0 included: an exit mid-case) records
// it in the store (announce_departure, from an exit handler), and its peers' waits, and their
// watchdogs where nothing times out (NCCL), end within a second naming it, not at the timeout.

// This rank's store and rank, where its departure is to be recorded; a World sets them on
// joining and clears them when the ranks have left together.
void set_departure_store(c10::intrusive_ptr<c10d::Store> store, int rank);
void clear_departure_store();
// Whether waits look for departures (watch_departures: an external launcher's ranks; ranks of
// parbench's own launcher are watched by it, from their exit statuses).
void watch_departures();
bool departures_watched();
// Records this rank's departure with exit status `status` where a store is set (an exit handler).
void announce_departure(int status) noexcept;
// "rank 1 exited early (status 0) before the case finished" where `rank` recorded a departure in
// `store` (or the store it prefixes); "" where it did not. Throws where the store does not answer.
std::string departure_of(c10d::Store& store, int rank);

// Counts the calling rank as done with one exchange's keys; the last of `readers` ranks to
// call deletes `keys` and the counter, so a long run does not grow the store.
void release_keys(c10d::Store& store, const std::string& counter, int readers, const std::vector<std::string>& keys);

}  // namespace parbench
