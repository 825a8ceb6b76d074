#include "strategies/distributed/world.h"

#include "strategies/distributed/store_backend.h"
#include "strategies/whole_number.h"
#include "strategies/distributed/store_sync.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <sstream>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace parbench {
namespace {

std::optional<std::string> environment(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

int parse_variable(const char* name, const std::string& text, int minimum, int maximum) {
  const auto value = parse_whole_number(text);
  if (!value) throw std::invalid_argument(std::string(name) + "=" + text + " is not a whole number");
  if (*value < minimum || *value > maximum) {
    throw std::invalid_argument(std::string(name) + "=" + text + " is outside " + std::to_string(minimum) + ".." +
                                std::to_string(maximum));
  }
  return static_cast<int>(*value);
}

// One launcher's names for rank, world size, local rank, and how many ranks share this node.
struct LauncherVariables {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;  // nullptr: use `nodes`
  const char* nodes;
};

constexpr LauncherVariables kLaunchers[] = {
    {"RANK/WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", nullptr},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr},
    {"SLURM", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", nullptr, "SLURM_STEP_NUM_NODES"},
};

constexpr int kMaxRanks = 1 << 20;


// A socket bound to `host`:`port` and listening; throws naming the address.
int listening_socket(const std::string& host, int port) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); error != 0) {
    throw std::runtime_error("cannot resolve the store's address " + host + ": " + gai_strerror(error));
  }
  std::string problem = "no address";
  for (const addrinfo* address = found; address != nullptr; address = address->ai_next) {
    const int fd = socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, address->ai_protocol);
    if (fd < 0) {
      problem = std::strerror(errno);
      continue;
    }
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // as TCPStore's own listen does
    if (bind(fd, address->ai_addr, address->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      freeaddrinfo(found);
      return fd;
    }
    problem = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(found);
  throw std::runtime_error("cannot listen on " + where + ": " + problem);
}

int bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw std::runtime_error(std::string("cannot read the store socket's port: ") + std::strerror(errno));
  }
  return ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

}  // namespace

std::optional<RankInfo> rank_info_from_environment() {
  for (const auto& launcher : kLaunchers) {
    const bool slurm = std::string(launcher.source) == "SLURM";
    const auto rank = environment(launcher.rank);
    const auto world_size = environment(launcher.world_size);
    // A batch script sees SLURM's variables of its allocation: only an srun step of several
    // tasks makes this process one rank of many.
    if ((!rank && !world_size) || (slurm && !world_size)) continue;
    if (!rank || !world_size) {
      throw std::invalid_argument(std::string(rank ? launcher.rank : launcher.world_size) + " is set but " +
                                  (rank ? launcher.world_size : launcher.rank) + " is not: a launcher sets both");
    }
    RankInfo info;
    info.source = launcher.source;
    info.world_size = parse_variable(launcher.world_size, *world_size, 1, kMaxRanks);
    if (slurm && info.world_size == 1) continue;
    info.rank = parse_variable(launcher.rank, *rank, 0, info.world_size - 1);
    const auto local_rank = environment(launcher.local_rank);
    info.local_rank = local_rank ? parse_variable(launcher.local_rank, *local_rank, 0, kMaxRanks) : info.rank;

    bool single_node = false;
    if (launcher.local_world_size != nullptr) {
      const auto local_size = environment(launcher.local_world_size);
      single_node =
          local_size && parse_variable(launcher.local_world_size, *local_size, 1, kMaxRanks) == info.world_size;
    } else {
      const auto nodes = environment(launcher.nodes);
      single_node = nodes && *nodes == "1";
    }
    if (const auto address = environment("MASTER_ADDR"); address && !address->empty()) {
      info.master_addr = *address;
    } else if (!single_node) {
      throw std::invalid_argument("MASTER_ADDR is not set and the " + std::to_string(info.world_size) +
                                  " ranks may span several nodes: set it to the address of the node of rank 0");
    }
    if (const auto port = environment("MASTER_PORT")) info.master_port = parse_variable("MASTER_PORT", *port, 1, 65535);
    info.launcher_hosts_store = environment("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True");
    return info;
  }
  return std::nullopt;
}

std::string this_host() {
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  return host.data();
}

c10::intrusive_ptr<c10d::TCPStore> host_rendezvous_store(const std::string& host, int port,
                                                         std::chrono::milliseconds timeout) {
  const int fd = listening_socket(host, port);
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(bound_port(fd));  // the server checks the socket's port against it
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = timeout;
  options.masterListenFd = fd;  // the server owns it from here
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

const std::map<std::string, std::string>& set_parbench_environment() {
  static const std::map<std::string, std::string> set_here = [] {
    std::map<std::string, std::string> set;
    // NVLink multicast (NVLS) stays off: on shared hosts it can take the GPUs out of service.
    constexpr std::pair<const char*, const char*> kSwitches[] = {
        {"NCCL_NVLS_ENABLE", "0"}, {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"}, {"NVSHMEM_DISABLE_NVLS", "1"}};
    for (const auto& [name, value] : kSwitches) {
      if (std::getenv(name) != nullptr) continue;
      setenv(name, value, /*overwrite=*/0);
      set.emplace(name, value);
    }
    return set;
  }();
  return set_here;
}

torch::Device rank_device(const RankInfo& info, int visible_gpus) {
  if (visible_gpus == 0) return torch::kCPU;
  if (visible_gpus == 1) return {torch::kCUDA, 0};
  if (info.local_rank >= visible_gpus) {
    throw std::invalid_argument("local rank " + std::to_string(info.local_rank) + " needs GPU " +
                                std::to_string(info.local_rank) + " but " + std::to_string(visible_gpus) +
                                " are visible");
  }
  return {torch::kCUDA, static_cast<c10::DeviceIndex>(info.local_rank)};
}

World::World(const RankInfo& info, torch::Device device, std::chrono::milliseconds timeout,
             std::function<void(const std::string& message)> stalled)
    : info_(info), device_(device), timeout_(timeout), stalled_(std::move(stalled)) {
  const std::string where = info.master_addr + ":" + std::to_string(info.master_port);
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(info.master_port);
  options.isServer = info.rank == 0 && !info.launcher_hosts_store;
  options.waitWorkers = false;  // joining is checked below, naming the missing ranks
  options.timeout = timeout;
  try {
    tcp_store_ = options.isServer ? host_rendezvous_store(info.master_addr, info.master_port, timeout)
                                  : c10::make_intrusive<c10d::TCPStore>(info.master_addr, options);
  } catch (const std::exception& error) {
    if (options.isServer) {
      throw std::runtime_error("rank 0 could not host the rendezvous store at " + where +
                               " (MASTER_ADDR:MASTER_PORT): " + first_line(error));
    }
    throw std::runtime_error("rank " + std::to_string(info.rank) + " could not reach the rendezvous store at " + where +
                             " (MASTER_ADDR:MASTER_PORT) within " + format_seconds(timeout) + ": " + first_line(error));
  }
  store_ = c10::make_intrusive<c10d::PrefixStore>("parbench", tcp_store_);
  set_departure_store(store_, info.rank);  // until the ranks leave together (store_sync.h)
  set_store_host(info.master_addr + ":" + std::to_string(info.master_port) + " (hosted by " +
                 (info.launcher_hosts_store ? std::string("the launcher)") : std::string("rank 0)")));
  report_progress("joining");
  watchdog_ = std::thread([this] { watch(); });
  try {
    join(where);
  } catch (...) {
    stop_watchdog();
    throw;
  }
  report_progress("the rendezvous");
  report_idle();
}

std::string arguments_difference(const std::string& theirs, const std::string& mine, int my_rank) {
  const auto words = [](const std::string& text) {
    std::vector<std::string> list;
    std::istringstream stream(text);
    for (std::string word; stream >> word;) {
      if (word.rfind("--benchmark_out", 0) != 0) list.push_back(word);
    }
    return list;
  };
  const auto a = words(theirs), b = words(mine);
  const auto me = "rank " + std::to_string(my_rank);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i < a.size() && i < b.size() && a[i] == b[i]) continue;
    if (i >= a.size()) return "no argument where " + me + " has " + b[i];
    if (i >= b.size()) return a[i] + " where " + me + " has none";
    return a[i] + " where " + me + " has " + b[i];
  }
  return "";
}

void World::join(const std::string& where) {
  if (store_->add("join/count/" + std::to_string(rank()), 1) > 1) {
    throw std::runtime_error("two processes joined as rank " + std::to_string(rank()) +
                             ": every rank needs its own RANK");
  }
  // The host and the arguments first: a rank's join key says its other keys are there.
  store_->set("host/" + std::to_string(rank()), this_host());
  store_->set("arguments/" + std::to_string(rank()), info_.arguments);
  store_->set("launch/" + std::to_string(rank()), info_.launch);
  store_->set("join/" + std::to_string(rank()), std::to_string(size()));
  hosts_.assign(static_cast<size_t>(size()), "");
  launches_.assign(static_cast<size_t>(size()), "");
  wait_for_ranks(*store_, "join/", size(), timeout_, "join the rendezvous at " + where, [this](int other) {
    hosts_[static_cast<size_t>(other)] = store_->get_to_str("host/" + std::to_string(other));
    launches_[static_cast<size_t>(other)] = store_->get_to_str("launch/" + std::to_string(other));
    // Ranks started with different command lines would run different cases and meet in
    // mismatched collectives: the cause is named here instead.
    const auto their_arguments = store_->get_to_str("arguments/" + std::to_string(other));
    if (!info_.arguments.empty() && !their_arguments.empty()) {
      const auto difference = arguments_difference(their_arguments, info_.arguments, rank());
      if (!difference.empty()) {
        throw std::runtime_error("rank " + std::to_string(other) + " was started with other arguments: " + difference +
                                 " (every rank needs the same command line)");
      }
    }
    const auto theirs = store_->get_to_str("join/" + std::to_string(other));
    if (theirs != std::to_string(size())) {
      throw std::runtime_error("rank " + std::to_string(other) + " was started with a world size of " + theirs +
                               ", rank " + std::to_string(rank()) + " with " + std::to_string(size()) +
                               ": every rank needs the same WORLD_SIZE");
    }
  });

  backend_ = make_backend("", rank(), size());
}

c10::intrusive_ptr<c10d::Backend> World::make_backend(const std::string& prefix, int rank, int size) {
  if (device_.is_cuda()) {
#ifdef USE_C10D_NCCL
    set_parbench_environment();  // before NCCL reads it; main has done so already
    c10::cuda::set_device(device_.index());
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = timeout_;
    auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(
        c10::make_intrusive<c10d::PrefixStore>(prefix + "nccl", tcp_store_), rank, size, nccl_options);
    // Now, while every member is known to be here, rather than inside the first collective.
    backend->setBoundDeviceId(device_);
    backend->eagerConnectSingleDevice(device_);
    return backend;
#else
    throw std::runtime_error("this parbench was built without NCCL, so ddp cannot run on GPUs");
#endif
  }
  // A sub-group's operations wait on the store from a thread of their own, beside the world's and
  // the other groups': each gets a connection of its own, since one connection serves one
  // blocking wait at a time (two groups sharing one could each wait behind the other's peers).
  return c10::make_intrusive<StoreBackend>(
      c10::make_intrusive<c10d::PrefixStore>(prefix + "store_backend", prefix.empty() ? tcp_store_ : tcp_store_->clone()),
      rank, size, timeout_);
}

c10::intrusive_ptr<c10d::Backend> World::make_group(const std::string& name, const std::vector<int>& ranks) {
  const auto mine = std::find(ranks.begin(), ranks.end(), rank());
  if (mine == ranks.end()) {
    throw std::invalid_argument("rank " + std::to_string(rank()) + " is not a member of group " + name);
  }
  // Numbered in creation order, the same on every rank (each makes the groups of a mesh in
  // the axes' order), so that a group made again for a later case has keys of its own.
  const auto prefix = "group" + std::to_string(next_group_++) + "/" + name + "/";
  return make_backend(prefix, static_cast<int>(mine - ranks.begin()), static_cast<int>(ranks.size()));
}

World::~World() {
  stop_watchdog();
  if (left_ || !backend_) return;
  try {
    backend_->shutdown();
  } catch (const std::exception&) {
    // Leaving after a failure: the failure has been reported already.
  }
}

void World::stop_watchdog() {
  {
    std::lock_guard<std::mutex> lock(progress_mutex_);
    stopping_ = true;
  }
  stop_watching_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

// A rank busy without progress for this long looks for a peer that has ended (store_sync.h): a
// wait that can time out finds it sooner, and fails the case instead of ending the process.
constexpr std::chrono::milliseconds kDepartureLookAfter{3000};
constexpr std::chrono::milliseconds kDepartureLookEvery{500};

// The message for the first peer that recorded its departure in `store`; "" if none did.
static std::string first_departure(c10d::Store& store, int size, int me) {
  for (int other = 0; other < size; ++other) {
    if (other == me) continue;
    auto departed = departure_of(store, other);
    if (!departed.empty()) return departed;
  }
  return "";
}

void World::watch() {
  const auto limit = timeout_ + kStallGrace;
  c10::intrusive_ptr<c10d::Store> departures;  // a connection of its own, made when first needed
  auto next_look = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(progress_mutex_);
  while (!stopping_) {
    stop_watching_.wait_for(lock, std::chrono::milliseconds(100));
    const auto now = std::chrono::steady_clock::now();
    const auto stalled_for = std::chrono::duration_cast<std::chrono::milliseconds>(now - progress_time_);
    if (stopping_ || !busy_) continue;
    std::string message;
    if (stalled_for >= kDepartureLookAfter && now >= next_look && departures_watched()) {
      next_look = now + kDepartureLookEvery;
      lock.unlock();
      try {
        if (!departures) departures = tcp_store_->clone();
        message = first_departure(*departures, size(), rank());
      } catch (const std::exception&) {
        // The store does not answer: the stall below says so in time.
      }
      lock.lock();
      if (message.empty()) continue;
      message += " (this rank at " + progress_ + ")";
    } else if (stalled_for < limit) {
      continue;
    }
    const auto where = progress_;
    const auto count = progress_count_;
    lock.unlock();
    if (message.empty()) message = describe_stall(where, count, stalled_for);
    // One write: other ranks' watchdogs may be printing to the same stderr at the same moment.
    const auto line = "parbench: " + rank_name(rank()) + ": " + message + "\n";
    [[maybe_unused]] const auto written = write(STDERR_FILENO, line.data(), line.size());
    if (stalled_) stalled_(message);
    std::fflush(nullptr);
    std::_Exit(1);
  }
}

// A store that takes longer than this to answer a read is stalled itself (describe_stall).
constexpr std::chrono::milliseconds kStoreAnswersWithin{2000};

std::string World::describe_stall(const std::string& where, uint64_t count, std::chrono::milliseconds stalled_for) {
  std::string message = "no progress for " + format_seconds(stalled_for) + " at " + where;
  const auto asked = std::chrono::steady_clock::now();
  // A store that answers late (its host was stopped, and continued) or not at all is the cause.
  const auto slow_store = [&] {
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - asked);
    return took > kStoreAnswersWithin ? "; the rendezvous store at " + store_host() + " took " + format_seconds(took) +
                                            " to answer (was its process stopped?)"
                                      : std::string();
  };
  try {
    // A connection of its own: the main thread may be inside a call on the shared one.
    c10d::PrefixStore store("parbench", tcp_store_->clone());
    constexpr int kRanksListed = 16;
    std::vector<int> behind;
    uint64_t least = count;
    std::string positions;
    for (int other = 0; other < size(); ++other) {
      const auto key = "progress/" + std::to_string(other);
      const auto value = store.check({key}) ? store.get_to_str(key) : std::string("0 the start");
      const auto space = value.find(' ');
      const uint64_t theirs = std::stoull(value.substr(0, space));
      if (other < kRanksListed) {
        positions += (other > 0 ? ", " : " (") + rank_name(other) + " at " + value.substr(space + 1);
      }
      if (theirs > least) continue;
      if (theirs < least) behind.clear();
      least = theirs;
      behind.push_back(other);
    }
    message += positions + (size() > kRanksListed ? ", ...)" : ")");
    const auto store_was_slow = slow_store();
    if (!store_was_slow.empty()) return message + store_was_slow;
    if (least < count) {
      std::string names;
      for (int other : behind) names += (names.empty() ? "" : ", ") + rank_name(other);
      message += "; behind: " + names;
    }
    return message;
  } catch (const std::exception& error) {
    return message + "; " + store_did_not_answer("read the ranks' progress", first_line(error));
  }
}

void World::barrier(const std::string& what) {
  const std::string prefix = "barrier/" + std::to_string(next_sequence_++) + "/";
  store_->set(prefix + std::to_string(rank()), "1");
  wait_for_ranks(*store_, prefix, size(), timeout_, "reach " + what);
  std::vector<std::string> keys;
  for (int other = 0; other < size(); ++other) keys.push_back(prefix + std::to_string(other));
  release_keys(*store_, prefix + "read", size(), keys);
}

void World::line_up_streams() {
  std::vector<at::Tensor> token{torch::zeros({1}, torch::TensorOptions().device(device_))};
  backend_->allreduce(token)->wait();
}

std::vector<std::string> World::gather_to_rank0(const std::string& value, const std::string& what) {
  const std::string prefix = "gather/" + std::to_string(next_sequence_++) + "/";
  store_->set(prefix + std::to_string(rank()), value);
  if (rank() != 0) return {};
  wait_for_ranks(*store_, prefix, size(), timeout_, "hand in " + what);
  std::vector<std::string> values;
  for (int other = 0; other < size(); ++other) {
    values.push_back(store_->get_to_str(prefix + std::to_string(other)));
    store_->deleteKey(prefix + std::to_string(other));
  }
  return values;
}

std::vector<std::string> World::gather_to_all(const std::string& value, const std::string& what) {
  const std::string prefix = "gather/" + std::to_string(next_sequence_++) + "/";
  store_->set(prefix + std::to_string(rank()), value);
  wait_for_ranks(*store_, prefix, size(), timeout_, "hand in " + what);
  std::vector<std::string> values;
  for (int other = 0; other < size(); ++other) values.push_back(store_->get_to_str(prefix + std::to_string(other)));
  return values;
}

void World::report_progress(const std::string& what) {
  uint64_t count = 0;
  {
    std::lock_guard<std::mutex> lock(progress_mutex_);
    count = ++progress_count_;
    progress_ = what;
    progress_time_ = std::chrono::steady_clock::now();
    busy_ = true;
  }
  store_->set("progress/" + std::to_string(rank()), std::to_string(count) + " " + what);
}

void World::report_idle() {
  std::lock_guard<std::mutex> lock(progress_mutex_);
  busy_ = false;
}

void World::report_own_work(const std::string& what) {
  report_progress(what);
  report_idle();
}

void World::leave() {
  if (left_) return;
  barrier("the end of the run");
  if (rank() == 0 && !info_.launcher_hosts_store) {
    // The others' last request is their "left" below: serve it before the server goes away.
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    while (store_->add("left", 0) < size() - 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } else {
    store_->add("left", 1);
  }
  clear_departure_store();  // left together: an exit from here on is no departure
  backend_->shutdown();
  left_ = true;
}

void World::abort() {
  report_idle();  // the rest of the run skips the distributed cases: nothing left to watch
  if (left_) return;
  left_ = true;
  try {
    backend_->abort();
  } catch (const std::exception&) {
    // Already failing: the first failure is the one reported.
  }
}

void World::set_places(std::function<std::string(int rank)> place) {
  std::lock_guard<std::mutex> lock(places_mutex_);
  place_ = std::move(place);
}

std::string World::rank_name(int rank) {
  std::lock_guard<std::mutex> lock(places_mutex_);
  const auto name = "rank " + std::to_string(rank);
  return place_ ? name + " (" + place_(rank) + ")" : name;
}

std::string progress_key(int rank) { return "parbench/progress/" + std::to_string(rank); }

}  // namespace parbench
