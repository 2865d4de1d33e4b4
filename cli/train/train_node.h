// `meridian train RUN.yaml ...`: one DiLoCo node of a real run (cli/train/cmd_train_node.cc).
// `meridian train` (cli/trainer/cmd_train.cc) runs it when its first argument is a file, and
// prints its help before the single worker's.
#pragma once

#include <string>
#include <vector>

namespace meridian::cli {

// Its help, which `meridian train --help` prints before the single worker's.
std::string train_node_help();
int run_train_node(const std::vector<std::string>& args);

}  // namespace meridian::cli
