# meridian_add_gtest(NAME LABEL label SOURCES ... LIBS ... [DISCOVER] [TIMEOUT s] [TIMING test...]
#                    [PROPERTIES prop value ...])
# One test program per call. DISCOVER registers each TEST as its own ctest (cheap programs);
# without it the whole program is one ctest (programs that load LibTorch, 0.45 s per start).
# TIMING names the tests (gtest filter patterns, e.g. FaultMatrix.TwoOfFourFailAtOnce) whose
# outcome depends on thread or process timing: they also carry the label `timing`, and `make
# test` retries those, and only those, once (scripts/ctest_retry_timing.sh). With DISCOVER only.
# Without DISCOVER, LABEL may be a list ("tsan;timing": the whole program is timing-dependent).
# PROPERTIES are more ctest properties of every test of the call (e.g. FIXTURES_REQUIRED name).
include_guard(GLOBAL)
include(GoogleTest)

function(meridian_add_gtest name)
  cmake_parse_arguments(T "DISCOVER" "TIMEOUT" "LABEL;SOURCES;LIBS;TIMING;PROPERTIES" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(T_TIMING AND NOT T_DISCOVER)
    message(FATAL_ERROR "meridian_add_gtest(${name}): TIMING needs DISCOVER")
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main meridian_flags)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  if(T_DISCOVER AND T_TIMING)
    string(JOIN ":" timing_filter ${T_TIMING})
    gtest_discover_tests(${name} TEST_FILTER "${timing_filter}"
      PROPERTIES LABELS ${T_LABEL} TIMEOUT ${T_TIMEOUT} ${T_PROPERTIES} DISCOVERY_TIMEOUT 60)
    # A list cannot pass through gtest_discover_tests' PROPERTIES (it is split into words), so
    # a script ctest includes after the discovered tests gives those of this call both labels.
    get_property(counter TARGET ${name} PROPERTY CTEST_DISCOVERED_TEST_COUNTER)
    set(tests_file "${CMAKE_CURRENT_BINARY_DIR}/${name}[${counter}]_tests.cmake")
    set(label_file "${CMAKE_CURRENT_BINARY_DIR}/${name}[${counter}]_timing.cmake")
    file(WRITE ${label_file}
      "if(EXISTS \"${tests_file}\")\n"
      "  file(STRINGS \"${tests_file}\" lines REGEX \"^add_test\")\n"
      "  foreach(line IN LISTS lines)\n"
      "    if(line MATCHES \"^add_test\\\\(\\\\[=\\\\[([^]]+)\\\\]=\\\\]\")\n"
      "      set_tests_properties(\"\${CMAKE_MATCH_1}\" PROPERTIES LABELS \"${T_LABEL};timing\")\n"
      "    endif()\n"
      "  endforeach()\n"
      "endif()\n")
    set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${label_file})
    gtest_discover_tests(${name} TEST_FILTER "-${timing_filter}"
      PROPERTIES LABELS ${T_LABEL} TIMEOUT ${T_TIMEOUT} ${T_PROPERTIES} DISCOVERY_TIMEOUT 60)
  elseif(T_DISCOVER)
    gtest_discover_tests(${name} PROPERTIES LABELS ${T_LABEL} TIMEOUT ${T_TIMEOUT}
      ${T_PROPERTIES} DISCOVERY_TIMEOUT 60)
  else()
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES LABELS "${T_LABEL}" TIMEOUT ${T_TIMEOUT} ${T_PROPERTIES})
  endif()
endfunction()
