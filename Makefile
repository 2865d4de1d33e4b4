# Meridian: `make demo` and `make test` on a fresh Debian 12 machine do everything
# (install the Debian packages, configure, build, run). Both are idempotent.
BUILD ?= build
JOBS ?= 2
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

# Debian packages the build, tests and demo need (apt-get runs only if one is missing).
DEB_PACKAGES := build-essential cmake ninja-build pkg-config git \
  libgtest-dev libgmock-dev libbenchmark-dev libboost-dev libboost-graph-dev \
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libeigen3-dev \
  libsimgrid-dev libgloo-dev libtorch-dev libopenblas0-openmp libdnnl-dev \
  libsentencepiece-dev sentencepiece gnuplot-nox fortunes-min fortunes zlib1g-dev \
  linux-doc-6.1 python3.11-doc perl-doc git-doc postgresql-doc-15 manpages manpages-dev \
  iproute2 ethtool chromium nodejs libns3-dev etcd-server etcd-client libssl-dev \
  clang-14 libclang-rt-14-dev slurmctld slurmd slurm-client

.PHONY: all deps configure build check-build test demo clean format post-training

all: build

deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "meridian: installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	else echo "meridian: all Debian packages present"; fi

configure: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Every ctest label but gpu (see README "Tests"; the churn soak, label `soak`, is ~5 minutes of
# it). Only tests labelled `timing` (their outcome depends on thread scheduling; named in README
# "Tests") are run once more when they fail, and the script names them; any other failure, or a
# timing test failing twice, fails the suite.
# Then the fuzz and tsan labels of the clang checking tree, with the same retry rule (a tsan
# program of timing-dependent mesh tests is labelled `timing` as a whole: tests/tsan).
test: build check-build
	OMP_NUM_THREADS=1 ./scripts/ctest_retry_timing.sh $(BUILD) -LE gpu $(CTEST_FLAGS)
	./scripts/ctest_retry_timing.sh $(CHECK_BUILD) $(CTEST_FLAGS)

# The fuzz and tsan labels: libFuzzer targets and ThreadSanitizer tests, built with clang in a
# tree of their own (tests/fuzz/README.md).
CHECK_BUILD ?= $(BUILD)-check
check-build: deps
	CC=clang-14 CXX=clang++-14 cmake -S . -B $(CHECK_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DMERIDIAN_FUZZ=ON -DMERIDIAN_TSAN=ON $(CMAKE_FLAGS)
	cmake --build $(CHECK_BUILD) -j $(JOBS)

demo: build
	OMP_NUM_THREADS=1 ./scripts/demo.sh $(BUILD)

# Base model, continual pre-training, Spectrum and merges (results/post-training/).
post-training: build
	scripts/studies/post-training/run.sh $(BUILD) results/post-training/run small 150 50 --batch 4 --seq-len 128

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	rm -rf $(BUILD) $(CHECK_BUILD)
