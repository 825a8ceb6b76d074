// The rendezvous store (docs/DISTRIBUTED.md, "The rendezvous store"): bound to loopback for a
// local launch, clear errors for an address it cannot take, and a run that survives clients
// that are not parbench's. On the CPU, with the store backend.
#include "benchmarks/launch/temporary_directory.h"
#include "strategies/distributed/world.h"
#include "tests/parbench_process.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

namespace parbench {
namespace {

constexpr double kDeadline = 120;  // the test kills parbench after this: a hang fails, it does not block CI

std::map<std::string, std::string> test_environment() {
  return {{"CUDA_VISIBLE_DEVICES", ""}, {"OMP_NUM_THREADS", "1"}, {"PARBENCH_STORE_TEST", std::to_string(getpid())}};
}

struct ListeningSocket {
  std::string address;  // as /proc/net/tcp writes it: hex, e.g. 0100007F for 127.0.0.1
  int port;
  bool ipv6;
};

// The sockets process `pid` listens on, from its file descriptors and /proc/net/tcp{,6}.
std::vector<ListeningSocket> listening_sockets(pid_t pid) {
  std::set<std::string> inodes;
  const auto fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* dir = opendir(fd_dir.c_str())) {
    while (const dirent* entry = readdir(dir)) {
      char target[256] = {};
      if (readlink((fd_dir + "/" + entry->d_name).c_str(), target, sizeof target - 1) <= 0) continue;
      const std::string text = target;
      if (text.rfind("socket:[", 0) == 0) inodes.insert(text.substr(8, text.size() - 9));
    }
    closedir(dir);
  }
  std::vector<ListeningSocket> sockets;
  for (const bool ipv6 : {false, true}) {
    std::ifstream table(ipv6 ? "/proc/net/tcp6" : "/proc/net/tcp");
    std::string line;
    std::getline(table, line);  // the header
    while (std::getline(table, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;  // 0A: LISTEN
      const auto colon = local.find(':');
      sockets.push_back({local.substr(0, colon), std::stoi(local.substr(colon + 1), nullptr, 16), ipv6});
    }
  }
  return sockets;
}

TEST(Store, ALocalStoreListensOnLoopbackOnly) {
  const auto store = host_rendezvous_store("127.0.0.1", 0, std::chrono::seconds(5));
  const auto sockets = listening_sockets(getpid());
  bool found = false;
  for (const auto& socket : sockets) {
    if (socket.port != store->getPort()) continue;
    found = true;
    EXPECT_FALSE(socket.ipv6);
    EXPECT_EQ(socket.address, "0100007F") << "the store listens beyond 127.0.0.1";
  }
  EXPECT_TRUE(found) << "no listening socket on the store's port " << store->getPort();
  // It serves: a client of its own address reads what the server wrote.
  store->set("key", std::vector<uint8_t>{'v'});
  c10d::TCPStoreOptions client;
  client.port = store->getPort();
  client.timeout = std::chrono::seconds(5);
  c10d::TCPStore reader("127.0.0.1", client);
  EXPECT_EQ(reader.get("key"), std::vector<uint8_t>{'v'});
}

TEST(Store, AnAddressThatCannotBeTakenIsNamed) {
  try {
    host_rendezvous_store("no-such-host.invalid", 0, std::chrono::seconds(5));
    ADD_FAILURE() << "an unresolvable host was accepted";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("cannot resolve the store's address no-such-host.invalid"),
              std::string::npos)
        << error.what();
  }
  const auto taken = host_rendezvous_store("127.0.0.1", 0, std::chrono::seconds(5));
  const auto port = std::to_string(taken->getPort());
  try {
    host_rendezvous_store("127.0.0.1", taken->getPort(), std::chrono::seconds(5));
    ADD_FAILURE() << "a port in use was accepted";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()), "cannot listen on 127.0.0.1:" + port + ": Address already in use");
  }
}

// A TCP connection to 127.0.0.1:port, or -1.
int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& bytes) {
  return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// A ddp case under parbench's launcher, with strangers connecting to its store while it runs:
// it must finish as if they were not there, with its store on loopback only.
TEST(Store, ARunGoesOnWhileStrangersConnectToItsStore) {
  TemporaryDirectory dir("parbench-store-test");
  const auto out = dir.file("run.json");
  ParbenchProcess parbench({"--strategies=ddp", "--models=tinycnn", "--batch=2", "--image=16", "--warmup=1",
                            "--repetitions=1", "--iterations=300", "--allreduce=off", "--dist-timeout=10",
                            "--benchmark_out=" + out, "--benchmark_out_format=json"},
                           test_environment());
  const auto rank = parbench.wait_for_rank(1, kDeadline);
  ASSERT_TRUE(rank) << parbench.err();
  const auto port_text = process_environment(*rank, "MASTER_PORT");
  ASSERT_TRUE(port_text);
  const int port = std::stoi(*port_text);

  const auto sockets = listening_sockets(parbench.pid());
  ASSERT_FALSE(sockets.empty()) << "the launcher listens on nothing";
  for (const auto& socket : sockets) {
    EXPECT_FALSE(socket.ipv6) << "the launcher listens on an IPv6 address, port " << socket.port;
    EXPECT_EQ(socket.address, "0100007F") << "the launcher listens beyond 127.0.0.1 on port " << socket.port;
  }

  std::vector<int> strangers;
  // Connects and says nothing, until the run ends.
  strangers.push_back(connect_to(port));
  // Random bytes.
  std::mt19937 random(7);
  std::string noise(64 * 1024, '\0');
  for (auto& byte : noise) byte = static_cast<char>(random());
  strangers.push_back(connect_to(port));
  EXPECT_TRUE(send_all(strangers.back(), noise));
  // Text, as a port scanner or a browser would send.
  strangers.push_back(connect_to(port));
  EXPECT_TRUE(send_all(strangers.back(), "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  // A command byte and then a length of 2^62: a key the server must not try to allocate.
  strangers.push_back(connect_to(port));
  EXPECT_TRUE(send_all(strangers.back(), std::string("\x00", 1) + std::string("\x00\x00\x00\x00\x00\x00\x00\x40", 8)));
  // Half a message, then silence.
  strangers.push_back(connect_to(port));
  EXPECT_TRUE(send_all(strangers.back(), std::string("\x01", 1)));
  for (const int fd : strangers) EXPECT_GE(fd, 0) << "a stranger could not connect: the run had ended";
  // Connections opened and closed at once.
  for (int i = 0; i < 50; ++i) {
    const int fd = connect_to(port);
    if (fd >= 0) close(fd);
  }

  const auto run = parbench.wait(kDeadline);
  for (const int fd : strangers) close(fd);
  EXPECT_FALSE(run.killed_at_deadline) << "the run hung";
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const auto json = read_json(out);
  int ran = 0;
  for (const auto& benchmark : json.at("benchmarks")) {
    EXPECT_FALSE(benchmark.value("error_occurred", false)) << benchmark.dump();
    ++ran;
  }
  EXPECT_GT(ran, 0);
  EXPECT_TRUE(live_processes_with("PARBENCH_STORE_TEST", std::to_string(getpid())).empty());
}

}  // namespace
}  // namespace parbench
