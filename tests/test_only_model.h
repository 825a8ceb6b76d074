// The model that exists only in tests (tests/test_only_model.cpp), as its tests see it: they
// find it by this name and never spell it, so that no file but its own names it.
#pragma once

namespace parbench::test_only_model {

// Its registered name.
extern const char* const kName;

// How many times this process has built it.
int builds();

// Where this environment variable names a file, every build appends its process's id to it, so
// that a test can tell which processes of a run built the model.
inline constexpr const char* kBuildLogVariable = "PARBENCH_TEST_MODEL_BUILD_LOG";

}  // namespace parbench::test_only_model
