// vgpu: the command-line tool. All logic lives in the library units; see commands.h.
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return vgpu::cli::Dispatch(args, std::cout, std::cerr);
}
