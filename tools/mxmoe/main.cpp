// The `mxmoe` command: check, probe, gen-checkpoint, run, bench, soak.
// Exit codes: 0 ok, 1 failure (a failed check, or a mxmoe::Error at run time), 2 usage error (a bad
// option value, or a bad MXMOE_BACKEND and the like: cli::UsageError).
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <string>

#include "cli_common.hpp"
#include "mxmoe/device.hpp"
#include "mxmoe/error.hpp"

namespace mxmoe::cli {
void add_bench_multi_command(CLI::App& app, int& exit_code);  // cmd_bench_multi.cu (several GPUs, NCCL)
}

int main(int argc, char** argv) {
  using namespace mxmoe::cli;
  CLI::App app{"mxmoe: the MXFP4 Mixture-of-Experts layer of gpt-oss models, on the CPU reference and NVIDIA GPUs"};
  app.name("mxmoe");
  app.require_subcommand(1);
  app.set_version_flag("--version", [] { return "mxmoe " + mxmoe::probe().version; });
  app.footer("Exit codes: 0 ok, 1 failure, 2 usage error. Run 'mxmoe COMMAND --help' for a command's options.");

  int exit_code = kExitOk;
  add_check_command(app, exit_code);
  add_probe_command(app, exit_code);
  add_gen_checkpoint_command(app, exit_code);
  add_run_command(app, exit_code);
  add_bench_command(app, exit_code);
  add_soak_command(app, exit_code);
  add_plan_command(app, exit_code);
  add_bench_multi_command(app, exit_code);

  // CLI11 would only say "a subcommand is required" here; name the unknown command and the valid ones.
  if (argc > 1 && argv[1][0] != '-') {
    const auto commands = app.get_subcommands([](CLI::App*) { return true; });
    std::string names;
    bool known = false;
    for (CLI::App* command : commands) {
      known = known || command->check_name(argv[1]);
      names += (names.empty() ? "" : ", ") + command->get_name();
    }
    if (!known) {
      std::cerr << "mxmoe: unknown command '" << argv[1] << "'; commands are: " << names
                << "\nRun with --help for more information.\n";
      return kExitUsage;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and --version are "errors" with exit code 0; everything else is a usage error.
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  } catch (const UsageError& e) {
    std::cout.flush();
    std::cerr << "error: " << e.what() << "\nRun with --help for more information.\n";
    return kExitUsage;
  } catch (const mxmoe::Error& e) {
    std::cout.flush();
    std::cerr << "error: " << e.what() << "\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    // Out of memory and the like: still a clean failure, never a crash.
    std::cout.flush();
    std::cerr << "error: " << e.what() << "\n";
    return kExitFailure;
  }
  return exit_code;
}
