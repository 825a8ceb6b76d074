#include "strategies/worker_thread.h"

#include <c10/core/AutogradState.h>

namespace parbench {

WorkerThread::WorkerThread() : thread_([this] { serve(); }) {}

WorkerThread::~WorkerThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void WorkerThread::start(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = std::move(job);
    busy_ = true;
    error_ = nullptr;
  }
  wake_.notify_all();
}

std::exception_ptr WorkerThread::finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return !busy_; });
  return error_;
}

void WorkerThread::serve() {
  // A backward started here runs here, not on LibTorch's one autograd thread per GPU: stages or
  // replicas that share a GPU then dispatch their backwards in parallel, as on GPUs of their own,
  // and none waits on another's (docs/STRATEGIES.md).
  c10::AutogradState::get_tls_state().set_multithreading_enabled(false);
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || job_; });
    if (stopping_) return;
    auto job = std::move(job_);
    job_ = nullptr;
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    error_ = error;
    busy_ = false;
    done_.notify_all();
  }
}

}  // namespace parbench
