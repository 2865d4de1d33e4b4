# meridian_add_gtest(NAME LABEL label SOURCES ... LIBS ... [DISCOVER] [TIMEOUT s])
# One test program per call. DISCOVER registers each TEST as its own ctest (cheap programs);
# without it the whole program is one ctest (programs that load LibTorch, 0.45 s per start).
include_guard(GLOBAL)
include(GoogleTest)

function(meridian_add_gtest name)
  cmake_parse_arguments(T "DISCOVER" "LABEL;TIMEOUT" "SOURCES;LIBS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main meridian_flags)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  if(T_DISCOVER)
    gtest_discover_tests(${name} PROPERTIES LABELS ${T_LABEL} TIMEOUT ${T_TIMEOUT}
      DISCOVERY_TIMEOUT 60)
  else()
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES LABELS ${T_LABEL} TIMEOUT ${T_TIMEOUT})
  endif()
endfunction()
