#!/usr/bin/env bash
# Run on the Debian build machine, before a GPU run: downloads the Debian packages that the GPU
# machine lacks (it has PyTorch, CUDA, NCCL, CMake and ninja, but no Debian -dev packages) into
# .gpudeps/ (git-ignored). The device call then carries .gpudeps and scripts/gpu/run.sh unpacks
# them. About 13 MB.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .gpudeps
cd .gpudeps
apt-get download libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev libboost1.74-dev \
  libeigen3-dev libgtest-dev libbenchmark-dev libbenchmark1debian \
  sentencepiece libsentencepiece0 libprotobuf-lite32 fortunes-min fortunes
ls -la
