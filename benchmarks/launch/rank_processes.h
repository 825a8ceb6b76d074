// Process supervision for parbench's own launcher: starting a case's ranks as processes of this
// binary, watching their progress, and killing and reaping them when one fails, stalls or the
// run is interrupted (docs/DISTRIBUTED.md).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace parbench {

struct LaunchRequest {
  std::string binary;                  // what every rank runs
  std::vector<std::string> arguments;  // after argv[0]
  int ranks = 1;
  std::chrono::milliseconds timeout{60000};  // --dist-timeout
  std::string error_dir;                     // a failing rank leaves its one-line reason in <error_dir>/error.<rank>
  std::map<std::string, std::string> environment;  // added to every rank's environment
  std::string mesh;  // the case's mesh ("dp2.tp2"; "" none): a failing rank is named with its place on it
};

// Hosts the rendezvous TCPStore on a free port of 127.0.0.1 (host_rendezvous_store: every rank
// is local) and starts request.ranks processes with RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT and TORCHELASTIC_USE_AGENT_STORE=True,
// in this process's environment (set_parbench_environment's variables included). The ranks share a
// process group, die with this process (PR_SET_PDEATHSIG) and write their stdout to stderr.
// Returns "" once every rank has exited 0. As soon as one fails, or when no rank has reported
// progress for 2 x timeout + 30 s, kills the group, reaps every process and returns one line
// naming the rank.
std::string launch_ranks(const LaunchRequest& request);

// For an interrupt (benchmarks/output/run_output.h): from now on no launch starts ranks; the ranks of
// the launch in progress, if any, are killed and reaped and its error_dir removed. Safe from
// any thread; returns once done.
void abandon_launches();

}  // namespace parbench
