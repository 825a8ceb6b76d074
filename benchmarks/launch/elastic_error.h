// Naming the root cause to torchrun (docs/DISTRIBUTED.md, "Timeouts and faults"): torchrun's
// agent gives each rank a file, $TORCHELASTIC_ERROR_FILE, and its failure summary quotes the
// message of the rank that failed first, by the timestamps in those files.
#pragma once

#include <string>

namespace parbench {

// Where TORCHELASTIC_ERROR_FILE is set and names no file yet (the first failure is the
// cause), writes `message` there in the format of torch.distributed.elastic's ErrorHandler:
// {"message": {"message": M, "extraInfo": {"py_callstack": M, "timestamp": "<seconds>"}}}, M being
// "parbench: <message>" (torchrun's summary shows py_callstack, a C++ program has no other).
// Does nothing otherwise; never throws (it runs on the way out of a failure).
void record_failure_for_launcher(const std::string& message) noexcept;

}  // namespace parbench
