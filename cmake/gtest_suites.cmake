# One CTest test per GoogleTest suite of TEST_EXE (`TEST_EXE --gtest_filter=Suite.*`), written to
# OUT as add_test/set_tests_properties calls that CTest includes (the directory's TEST_INCLUDE_FILES;
# CMakeLists.txt). Run after each link of the test binary, as gtest_discover_tests runs:
#   cmake -DTEST_EXE=... -DOUT=... -DTIMEOUT=... -DENVIRONMENT=... -P cmake/gtest_suites.cmake
# Why per suite and not per case (gtest_discover_tests): each process of the test binary loads
# libtorch before its first line (0.22 s of CPU on 2 cores), and 376 cases paid it 376 times,
# 126 suites pay it 126 times (docs/speed.md). A suite's cases run in one process, in order, as
# `scaleinv_tests` alone runs them all; its test fails when any case fails, and its output names it.
execute_process(COMMAND "${TEST_EXE}" --gtest_list_tests
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TEST_EXE} --gtest_list_tests exited ${rc}:\n${listing}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(script "")
foreach(line IN LISTS lines)
  # A suite's line starts at column 0 and ends with '.' (its cases follow, indented).
  if(line MATCHES "^([A-Za-z0-9_/]+)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND script
      "add_test([=[${suite}]=] [==[${TEST_EXE}]==] [=[--gtest_filter=${suite}.*]=])\n"
      "set_tests_properties([=[${suite}]=] PROPERTIES TIMEOUT ${TIMEOUT} SKIP_RETURN_CODE 77 "
      "ENVIRONMENT [=[${ENVIRONMENT}]=])\n")
  endif()
endforeach()
if(script STREQUAL "")
  message(FATAL_ERROR "${TEST_EXE} --gtest_list_tests listed no suite:\n${listing}")
endif()
file(WRITE "${OUT}.tmp" "${script}")
file(RENAME "${OUT}.tmp" "${OUT}")
