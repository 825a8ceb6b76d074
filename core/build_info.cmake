# Runs at every build (CMakeLists.txt, target parbench_build_info): writes the commit the
# sources were built from, and whether tracked files differed from it, into a header. The
# binary then names its own source wherever it runs, also as a copy on another machine.
# configure_file leaves the header untouched when nothing changed, so nothing recompiles.
#   -DSOURCE_DIR=... -DOUTPUT=... [-DDECLARED_SHA=...]
set(sha "${DECLARED_SHA}")
set(dirty "unknown")
if(sha STREQUAL "")
  execute_process(COMMAND git -C "${SOURCE_DIR}" rev-parse --verify -q HEAD
                  OUTPUT_VARIABLE sha OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE sha_status)
  if(NOT sha_status EQUAL 0 OR sha STREQUAL "")
    set(sha "unknown")
  else()
    execute_process(COMMAND git -C "${SOURCE_DIR}" status --porcelain --untracked-files=no
                    OUTPUT_VARIABLE changes RESULT_VARIABLE status_status ERROR_QUIET)
    if(status_status EQUAL 0)
      if(changes STREQUAL "")
        set(dirty "false")
      else()
        set(dirty "true")
      endif()
    endif()
  endif()
endif()
set(PARBENCH_BUILT_GIT_SHA "${sha}")
set(PARBENCH_BUILT_GIT_DIRTY "${dirty}")
configure_file("${CMAKE_CURRENT_LIST_DIR}/build_info.h.in" "${OUTPUT}" @ONLY)
