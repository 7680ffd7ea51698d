// `mxmoe probe`: what this build was compiled for and what the machine's GPUs can run.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "cli_common.hpp"
#include "mxmoe/device.hpp"

namespace mxmoe::cli {

void add_probe_command(CLI::App& app, int& exit_code) {
  CLI::App* cmd = app.add_subcommand("probe", "Show the compiled CUDA architectures, the GPUs and the usable backends");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "Print JSON instead of text");
  cmd->callback([json, &exit_code] {
    ProbeResult result = probe();
    // The block-scaled path's self-test on each GPU whose kernels run here (docs/native-mx.md).
    for (GpuInfo& g : result.gpus)
      if (!g.runnable_backends.empty()) g.mx_self_test = mx_self_test_report(g.index);
    std::cout << (*json ? probe_to_json(result) + "\n" : probe_to_text(result));
    exit_code = kExitOk;
  });
}

}  // namespace mxmoe::cli
