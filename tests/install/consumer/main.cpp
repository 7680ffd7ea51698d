// Uses the installed headers and library: a config, the CPU reference through the runner, and the
// error type. Exit 0 only when all of it works.
#include <mxmoe/mxmoe.hpp>

#include <cstdio>
#include <vector>

int main() {
  const mxmoe::MoeConfig config = mxmoe::MoeConfig::tiny();
  config.validate();

  // A bad config must throw mxmoe::Error (the exception type crosses the library boundary).
  bool threw = false;
  try {
    mxmoe::MoeConfig bad = config;
    bad.top_k = 0;
    bad.validate();
  } catch (const mxmoe::Error&) {
    threw = true;
  }
  if (!threw) {
    std::fprintf(stderr, "consumer: MoeConfig::validate accepted top_k = 0\n");
    return 1;
  }

  const mxmoe::MoeLayerData layer = mxmoe::MoeLayerData::random(config, 1);
  const mxmoe::MoeRunner runner(config, layer.view(), {mxmoe::Backend::Reference, 2, false});
  std::vector<uint16_t> hidden(2 * config.hidden, mxmoe::float_to_bf16(0.5f));
  std::vector<float> logits(2 * config.num_experts, 0.0f);
  logits[1] = 1.0f;
  std::vector<uint16_t> out(hidden.size(), 0xFFFF);
  runner.forward(hidden.data(), logits.data(), 2, out.data(), nullptr, 0);
  for (uint16_t v : out)
    if (mxmoe::bf16_to_float(v) != mxmoe::bf16_to_float(v)) {
      std::fprintf(stderr, "consumer: NaN in the output\n");
      return 1;
    }
  std::printf("consumer: mxmoe %s works from its install tree\n", mxmoe::probe().version.c_str());
  return 0;
}
