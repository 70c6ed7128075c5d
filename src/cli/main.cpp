// deepinfer command-line entry point.
#include <CLI/CLI.hpp>
#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"deepinfer: inference engine for DeepSeek V4 / V4.1"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
