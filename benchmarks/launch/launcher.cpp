#include "benchmarks/launch/launcher.h"

#include "benchmarks/launch/rank_processes.h"
#include "benchmarks/launch/rank_protocol.h"
#include "benchmarks/launch/temporary_directory.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>

namespace parbench {

RankedRun launch_case(const std::string& binary, const std::vector<std::string>& arguments,
                      const LaunchedCase& launched, int ranks, double timeout_s,
                      const std::map<std::string, std::string>& environment) {
  if (launched.fields.empty()) throw std::invalid_argument("case " + launched.name + " has no fields to launch it with");
  TemporaryDirectory results(kRanksDirectoryPrefix);
  {
    std::ofstream fields(results.path() + "/" + kCaseFile);
    fields << launched.fields;
    if (!fields) throw std::runtime_error("cannot write " + results.path() + "/" + kCaseFile);
  }
  LaunchRequest request;
  request.binary = binary;
  request.arguments = {kWorkerFlag + launched.name, kResultsFlag + results.path()};
  request.arguments.insert(request.arguments.end(), arguments.begin(), arguments.end());
  request.arguments.push_back("--dist-timeout=" + std::to_string(timeout_s));  // the last one given wins
  request.ranks = ranks;
  request.timeout = timeout_of(timeout_s);
  request.error_dir = results.path();
  request.environment = environment;
  const auto fields = nlohmann::json::parse(launched.fields, nullptr, /*allow_exceptions=*/false);
  if (fields.is_object() && fields.contains("mesh") && fields["mesh"].is_string()) {
    request.mesh = fields["mesh"].get<std::string>();
  }
  const auto failure = launch_ranks(request);
  if (!failure.empty()) throw std::runtime_error(failure);
  std::ifstream file(results.path() + "/" + kResultFile);
  if (!file) throw std::runtime_error("rank 0 exited cleanly but wrote no result");
  return ranked_run_from(nlohmann::json::parse(file));
}

}  // namespace parbench
