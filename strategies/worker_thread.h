// A host thread that runs one job at a time: a pipeline stage's program, a data-parallel
// replica's forward or backward. C++ has no GIL, so jobs on several of these dispatch in
// parallel; a backward started in a job runs on its thread (not on the GPU's autograd thread).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace parbench {

class WorkerThread {
 public:
  WorkerThread();
  ~WorkerThread();
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  void start(std::function<void()> job);
  // Waits for the job (whose own waits must be bounded) and returns what it threw, if anything.
  std::exception_ptr finish();

 private:
  void serve();

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::function<void()> job_;
  bool busy_ = false, stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: it starts serving once the members above exist
};

}  // namespace parbench
