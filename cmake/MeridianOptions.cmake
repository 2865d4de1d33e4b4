# Build options and dependency discovery. An ON option whose dependency is missing stops
# configure with the Debian package that provides it; AUTO options turn off quietly.
include_guard(GLOBAL)
include(CheckCXXCompilerFlag)

# A checking tree (tests/fuzz/README.md): the `fuzz` label's libFuzzer targets (clang only) and
# the `tsan` label's ThreadSanitizer tests, alone in a build directory of their own. Such a tree
# needs none of the heavy dependencies, so they default to off there.
option(MERIDIAN_FUZZ "Checking tree: build tests/fuzz (libFuzzer targets, needs clang), not the project" OFF)
option(MERIDIAN_TSAN "Checking tree: build tests/tsan (ThreadSanitizer tests), not the project" OFF)
if(MERIDIAN_FUZZ OR MERIDIAN_TSAN)
  foreach(_heavy MERIDIAN_WITH_SIMGRID MERIDIAN_WITH_GLOO MERIDIAN_WITH_TORCH MERIDIAN_BUILD_BENCH
                 MERIDIAN_SANITIZE_TESTS)
    set(${_heavy} OFF CACHE BOOL "off in a checking tree (MERIDIAN_FUZZ / MERIDIAN_TSAN)")
  endforeach()
  set(MERIDIAN_WITH_NCCL OFF CACHE STRING "off in a checking tree")
  set(MERIDIAN_WITH_NS3 OFF CACHE STRING "off in a checking tree")
endif()
if(MERIDIAN_FUZZ AND NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "MERIDIAN_FUZZ=ON needs clang (libFuzzer), found ${CMAKE_CXX_COMPILER_ID}.\n"
    "  Fix: apt-get install -y clang-14 libclang-rt-14-dev, then configure a fresh build directory\n"
    "  with CC=clang-14 CXX=clang++-14 (or run `make test`, which builds build-check so)")
endif()

option(MERIDIAN_WITH_SIMGRID "Build netsim/ (SimGrid network simulation)" ON)
option(MERIDIAN_WITH_GLOO "Build the Gloo transport (real multi-process runs)" ON)
option(MERIDIAN_WITH_TORCH "Build trainer/ (LibTorch models and training)" ON)
set(MERIDIAN_WITH_NCCL "AUTO" CACHE STRING "Build the NCCL transport: ON, OFF or AUTO (on when CUDA and nccl.h are found)")
set_property(CACHE MERIDIAN_WITH_NCCL PROPERTY STRINGS ON OFF AUTO)
option(MERIDIAN_BUILD_TESTS "Build the GoogleTest suite" ON)
option(MERIDIAN_BUILD_BENCH "Build the Google Benchmark programs" ON)
option(MERIDIAN_SANITIZE_TESTS "Build the 'sanitize' label's ASan+UBSan test programs" ON)
option(MERIDIAN_NATIVE_X86_64_V3 "Compile for x86-64-v3 (AVX2/FMA) when the build machine has it" ON)

set(MERIDIAN_FOUND_SUMMARY "")
macro(meridian_found what detail)
  list(APPEND MERIDIAN_FOUND_SUMMARY "  ${what}: ${detail}")
endmacro()

# Fails configure for an ON option whose dependency is missing.
function(meridian_require found option debian_package what)
  if(NOT ${found})
    message(FATAL_ERROR
      "${option}=ON but ${what} was not found.\n"
      "  Fix: apt-get install -y ${debian_package}   (or configure with -D${option}=OFF)")
  endif()
endfunction()

# Flags live on an INTERFACE target, never on CMAKE_CXX_FLAGS.
add_library(meridian_flags INTERFACE)
target_compile_options(meridian_flags INTERFACE -Wall -Wextra -Wno-unused-parameter)
if(MERIDIAN_NATIVE_X86_64_V3 AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  check_cxx_compiler_flag(-march=x86-64-v3 MERIDIAN_HAS_V3_FLAG)
  set(_avx2 OFF)
  if(EXISTS /proc/cpuinfo)
    file(READ /proc/cpuinfo _cpuinfo)
    if(_cpuinfo MATCHES " avx2 " AND _cpuinfo MATCHES " fma ")
      set(_avx2 ON)
    endif()
  endif()
  if(MERIDIAN_HAS_V3_FLAG AND _avx2)
    target_compile_options(meridian_flags INTERFACE -march=x86-64-v3)
    meridian_found("codegen" "x86-64-v3 (AVX2, FMA)")
    # Clang compiles the codecs' AVX-512 kernels only for an AVX-512 translation unit
    # (engine/core/codec/codec_kernels.h); the clang checking tree runs only on this machine.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND _cpuinfo MATCHES " avx512f " AND
       _cpuinfo MATCHES " avx512bw " AND _cpuinfo MATCHES " avx512vl " AND
       _cpuinfo MATCHES " avx512dq " AND _cpuinfo MATCHES " avx512vbmi ")
      target_compile_options(meridian_flags INTERFACE
        -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vbmi)
      meridian_found("codegen (clang)" "x86-64-v3 + AVX-512 (this machine's codec kernels)")
    endif()
  else()
    meridian_found("codegen" "generic x86-64")
  endif()
endif()

find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(Boost 1.74 REQUIRED)
meridian_found("Boost (header-only: graph)" "${Boost_VERSION}")

if(MERIDIAN_BUILD_TESTS)
  find_package(GTest CONFIG QUIET)
  meridian_require(GTest_FOUND MERIDIAN_BUILD_TESTS libgtest-dev "GoogleTest")
  meridian_found("GoogleTest" "${GTest_VERSION}")
endif()
if(MERIDIAN_BUILD_BENCH)
  find_package(benchmark CONFIG QUIET)
  meridian_require(benchmark_FOUND MERIDIAN_BUILD_BENCH libbenchmark-dev "Google Benchmark")
  meridian_found("Google Benchmark" "${benchmark_VERSION}")
endif()

find_package(yaml-cpp CONFIG QUIET)
if(NOT yaml-cpp_FOUND)
  message(FATAL_ERROR "yaml-cpp not found (scenarios and configs are YAML).\n  Fix: apt-get install -y libyaml-cpp-dev")
endif()
find_package(nlohmann_json CONFIG QUIET)
if(NOT nlohmann_json_FOUND)
  message(FATAL_ERROR "nlohmann-json not found (results are JSON).\n  Fix: apt-get install -y nlohmann-json3-dev")
endif()
meridian_found("yaml-cpp / nlohmann-json" "${yaml-cpp_VERSION} / ${nlohmann_json_VERSION}")

if(MERIDIAN_WITH_SIMGRID)
  pkg_check_modules(SIMGRID QUIET IMPORTED_TARGET simgrid)
  meridian_require(SIMGRID_FOUND MERIDIAN_WITH_SIMGRID libsimgrid-dev "SimGrid (pkg-config simgrid)")
  meridian_found("SimGrid" "${SIMGRID_VERSION}")
else()
  meridian_found("SimGrid" "off")
endif()

if(MERIDIAN_WITH_GLOO)
  find_package(Gloo CONFIG QUIET)
  meridian_require(Gloo_FOUND MERIDIAN_WITH_GLOO libgloo-dev "Gloo (GlooConfig.cmake)")
  meridian_found("Gloo" "found")
else()
  meridian_found("Gloo" "off")
endif()

if(MERIDIAN_WITH_TORCH)
  find_package(Torch QUIET)
  meridian_require(Torch_FOUND MERIDIAN_WITH_TORCH "libtorch-dev libopenblas0-openmp" "LibTorch (TorchConfig.cmake)")
  meridian_found("LibTorch" "${Torch_VERSION} (${TORCH_INSTALL_PREFIX})")
  find_package(Eigen3 3.4 QUIET NO_MODULE)
  meridian_require(Eigen3_FOUND MERIDIAN_WITH_TORCH libeigen3-dev "Eigen 3.4")
else()
  meridian_found("LibTorch" "off")
endif()

# NCCL: AUTO looks in the CUDA toolkit (/usr/local/cuda here) and in NCCL_ROOT.
set(MERIDIAN_HAVE_NCCL OFF)
if(NOT MERIDIAN_WITH_NCCL STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  find_path(NCCL_INCLUDE_DIR nccl.h
    HINTS ${NCCL_ROOT}/include $ENV{NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(NCCL_LIBRARY nccl
    HINTS ${NCCL_ROOT}/lib $ENV{NCCL_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib /usr/local/cuda/lib64)
  if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(MERIDIAN_HAVE_NCCL ON)
    meridian_found("NCCL" "${NCCL_LIBRARY} (CUDA ${CUDAToolkit_VERSION})")
  elseif(MERIDIAN_WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "MERIDIAN_WITH_NCCL=ON but CUDA and nccl.h were not both found.\n"
      "  Fix: install the CUDA toolkit with NCCL (or set NCCL_ROOT), or configure with -DMERIDIAN_WITH_NCCL=OFF")
  else()
    meridian_found("NCCL" "not found (AUTO: off)")
  endif()
else()
  meridian_found("NCCL" "off")
endif()

# ns-3: only bench/ns3/'s packet-level reference (results/fidelity/ns3/); AUTO turns it off
# quietly. Found by hand: Debian 12's ns3Config.cmake names a helper (ns3.37-raw-sock-creator)
# that libns3-dev does not ship, so find_package(ns3) fails, and its pkg-config files carry a
# broken include flag ("-I/usr;").
set(MERIDIAN_WITH_NS3 "AUTO" CACHE STRING "Build bench/ns3 (ns-3 reference for the WAN model): ON, OFF or AUTO")
set_property(CACHE MERIDIAN_WITH_NS3 PROPERTY STRINGS ON OFF AUTO)
set(MERIDIAN_HAVE_NS3 OFF)
if(NOT MERIDIAN_WITH_NS3 STREQUAL "OFF")
  find_path(NS3_INCLUDE_DIR ns3/version-defines.h)
  set(NS3_LIBRARIES "")
  set(_ns3_all_found ON)
  foreach(_m core network internet point-to-point traffic-control)
    find_library(NS3_${_m}_LIBRARY NAMES ns3-${_m} ns3.37-${_m})
    if(NS3_${_m}_LIBRARY)
      list(APPEND NS3_LIBRARIES ${NS3_${_m}_LIBRARY})
    else()
      set(_ns3_all_found OFF)
    endif()
  endforeach()
  set(NS3_VERSION "")
  if(NS3_INCLUDE_DIR)
    file(STRINGS ${NS3_INCLUDE_DIR}/ns3/version-defines.h _ns3_ver REGEX "define NS3_VERSION_(MAJOR|MINOR) ")
    string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*" "\\1.\\2" NS3_VERSION "${_ns3_ver}")
  endif()
  if(NS3_INCLUDE_DIR AND _ns3_all_found AND NS3_VERSION VERSION_GREATER_EQUAL 3.37)
    set(MERIDIAN_HAVE_NS3 ON)
    meridian_found("ns-3" "${NS3_VERSION} (bench/ns3)")
  elseif(MERIDIAN_WITH_NS3 STREQUAL "ON")
    message(FATAL_ERROR "MERIDIAN_WITH_NS3=ON but ns-3 >= 3.37 (headers and libraries) was not found.\n"
      "  Fix: apt-get install -y libns3-dev   (or configure with -DMERIDIAN_WITH_NS3=OFF)")
  else()
    meridian_found("ns-3" "not found (AUTO: off; apt-get install -y libns3-dev)")
  endif()
else()
  meridian_found("ns-3" "off")
endif()

find_program(GNUPLOT_EXECUTABLE gnuplot)
if(GNUPLOT_EXECUTABLE)
  meridian_found("gnuplot" "${GNUPLOT_EXECUTABLE}")
else()
  meridian_found("gnuplot" "not found (plots disabled; apt-get install -y gnuplot-nox)")
endif()

function(meridian_print_summary)
  message(STATUS "")
  message(STATUS "Meridian ${PROJECT_VERSION} configuration (${CMAKE_BUILD_TYPE}):")
  foreach(line IN LISTS MERIDIAN_FOUND_SUMMARY)
    message(STATUS "${line}")
  endforeach()
  message(STATUS "")
endfunction()
