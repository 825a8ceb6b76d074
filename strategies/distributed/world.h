// One rank's view of a distributed run: where it stands (rank, world size, rendezvous
// address), the rendezvous through a c10d TCPStore, and the process group ddp all-reduces
// with: c10d's ProcessGroupNCCL on a GPU, StoreBackend on the CPU.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace parbench {

struct RankInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // the GPU this rank uses on its node
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // TORCHELASTIC_USE_AGENT_STORE=True: the launcher (torchrun's agent, parbench's own) hosts the
  // TCPStore and every rank is a client; otherwise rank 0 hosts it, as torch.distributed does.
  bool launcher_hosts_store = false;
  std::string source;  // which variables were read, for messages
  // The command line that must be the same on every rank (--benchmark_out* left out: only rank 0
  // writes); empty: not compared.
  std::string arguments;
  // What this rank says about its launch (its host, node, launcher and network variables, as
  // text the caller chose), published at the join: World::launches() on every rank.
  std::string launch;
};

// What differs between two ranks' command lines, e.g. "--batch=3 where rank 0 has --batch=2";
// "" when they are the same.
std::string arguments_difference(const std::string& theirs, const std::string& mine, int my_rank);

// The rank's place from the environment, first match wins: RANK and WORLD_SIZE (torchrun,
// parbench's launcher; LOCAL_RANK), Open MPI's OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK, or SLURM's
// SLURM_PROCID/SLURM_STEP_NUM_TASKS/SLURM_LOCALID inside an srun step of more than one task.
// MASTER_PORT defaults to 29500; MASTER_ADDR to 127.0.0.1 when every rank is on this node.
// nullopt when no launcher's variables are set; std::invalid_argument naming a bad variable.
std::optional<RankInfo> rank_info_from_environment();

// This machine's host name (gethostname).
std::string this_host();

// The device a rank trains on: none visible, the CPU; exactly one (srun --gpus-per-task=1,
// CUDA_VISIBLE_DEVICES per rank), that one; otherwise GPU <local rank>. Throws
// std::invalid_argument when the local rank has no GPU of its number.
torch::Device rank_device(const RankInfo& info, int visible_gpus);

// A TCPStore server listening on `host`'s address only, on `port` (0: a free one, chosen by the
// kernel). LibTorch's TCPStore alone listens on every interface; here the socket is bound first
// and handed over (TCPStoreOptions::masterListenFd). The store is unauthenticated
// (docs/DISTRIBUTED.md): 127.0.0.1 when every rank is on this machine. Throws
// std::runtime_error naming the address that could not be resolved or bound.
c10::intrusive_ptr<c10d::TCPStore> host_rendezvous_store(const std::string& host, int port,
                                                         std::chrono::milliseconds timeout);

// The variables parbench sets for itself and its ranks where the user has not, so that NVLink
// multicast stays off: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
// NVSHMEM_DISABLE_NVLS=1. Sets them in this process once; returns those it set.
const std::map<std::string, std::string>& set_parbench_environment();

// How long past the timeout a busy rank may go without progress before its watchdog ends it:
// waits that time out themselves report first, with their own message.
inline constexpr std::chrono::milliseconds kStallGrace{5000};

class World {
 public:
  // Connects to the rendezvous store (rank 0 hosts it unless the launcher does), waits up to
  // `timeout` for every rank to join with the same world size, and creates the backend: NCCL
  // (its timeout set to `timeout`) when `device` is a GPU, StoreBackend otherwise. Throws
  // std::runtime_error naming the rank that did not join or the address that was unreachable.
  //
  // Some waits cannot time out: a device synchronisation behind a collective that a peer never
  // joined. So a watchdog thread ends the process (exit code 1) when the rank is busy and has
  // reported no progress for timeout + kStallGrace, after passing `stalled` a message that
  // names the ranks behind (from every rank's progress in the store).
  World(const RankInfo& info, torch::Device device, std::chrono::milliseconds timeout,
        std::function<void(const std::string& message)> stalled);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return info_.rank; }
  int size() const { return info_.world_size; }
  const RankInfo& info() const { return info_; }
  // Each rank's host name, by rank, as each reported it on joining.
  const std::vector<std::string>& hosts() const { return hosts_; }
  // Each rank's RankInfo::launch, by rank, as each published it on joining.
  const std::vector<std::string>& launches() const { return launches_; }
  torch::Device device() const { return device_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const c10::intrusive_ptr<c10d::Backend>& backend() const { return backend_; }
  std::string backend_name() const { return backend_->getBackendName(); }

  // Host-side barrier through the store; throws "rank 1 did not reach <what> within 60 s".
  void barrier(const std::string& what);
  // Queues a one-element all-reduce on this rank's current stream: every rank's stream leaves
  // it within microseconds of the others, which a host barrier cannot promise. Does not wait.
  void line_up_streams();
  // Every rank's `value` in rank order on rank 0; an empty list on the other ranks.
  std::vector<std::string> gather_to_rank0(const std::string& value, const std::string& what);
  // Every rank's `value` in rank order, on every rank.
  std::vector<std::string> gather_to_all(const std::string& value, const std::string& what);
  // Publishes what this rank is doing, so a launcher or a stalled peer can name the rank that
  // fell behind, and marks the rank busy: its watchdog runs.
  void report_progress(const std::string& what);
  // Between cases: nothing to watch.
  void report_idle();
  // Work of this rank's own that waits for no peer (building a model on the host: gpt-6.7b takes
  // about a minute): published as progress, but the watchdog does not run, since nothing in it
  // can hang on another rank. The next report_progress marks the rank busy again.
  void report_own_work(const std::string& what);
  // Leaves together: waits for every rank, so the rank hosting the store outlives the others'
  // last use of it, then shuts the backend down.
  void leave();
  // After a failure: abandons the backend's pending work without waiting for the other ranks.
  void abort();

  // A process group of `ranks` (world ranks; this rank among them), of the world's kind (NCCL on
  // a GPU, StoreBackend otherwise), through the world's rendezvous: every member calls it, with
  // the same name and ranks, in the same order as its other groups (strategies/distributed/device_mesh.h).
  c10::intrusive_ptr<c10d::Backend> make_group(const std::string& name, const std::vector<int>& ranks);
  // Each rank's place on the case's mesh ("dp=1,tp=0"), named beside its number in the messages of
  // a stall; null: numbers alone. Set while a mesh case runs.
  void set_places(std::function<std::string(int rank)> place);
  // "rank 2", or "rank 2 (dp=1,tp=0)" while a mesh's places are set.
  std::string rank_name(int rank);

 private:
  RankInfo info_;
  torch::Device device_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> tcp_store_;  // on the hosting rank, also the server
  c10::intrusive_ptr<c10d::Store> store_;      // parbench's keys, under "parbench/"
  c10::intrusive_ptr<c10d::Backend> backend_;
  uint64_t next_sequence_ = 0;  // barriers and gathers are numbered in call order
  uint64_t next_group_ = 0;     // make_group's groups, numbered in creation order
  bool left_ = false;
  std::vector<std::string> hosts_;
  std::vector<std::string> launches_;

  // Waits for every rank to join with the same world size, then creates the backend.
  void join(const std::string& where);
  // A backend of `size` ranks, this one `rank` among them, its keys under `prefix`.
  c10::intrusive_ptr<c10d::Backend> make_backend(const std::string& prefix, int rank, int size);
  void watch();
  void stop_watchdog();
  std::string describe_stall(const std::string& where, uint64_t count, std::chrono::milliseconds stalled_for);

  std::function<void(const std::string&)> stalled_;
  std::mutex places_mutex_;
  std::function<std::string(int)> place_;
  std::mutex progress_mutex_;
  std::condition_variable stop_watching_;
  uint64_t progress_count_ = 0;  // the same sequence on every rank, so counts compare
  std::string progress_;
  std::chrono::steady_clock::time_point progress_time_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread watchdog_;
};

// The TCPStore key where `rank` reports progress: "<count> <what>", counts being comparable
// across ranks.
std::string progress_key(int rank);


}  // namespace parbench
