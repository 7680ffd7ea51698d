#pragma once
// mxmoe: the fused MXFP4 Mixture-of-Experts layer. Umbrella header.
#include "mxmoe/checkpoint.hpp"
#include "mxmoe/config.hpp"
#include "mxmoe/device.hpp"
#include "mxmoe/error.hpp"
#include "mxmoe/formats.hpp"
#include "mxmoe/reference.hpp"
#include "mxmoe/runner.hpp"
#include "mxmoe/scale_layout.hpp"
#include "mxmoe/shard.hpp"
#include "mxmoe/sharded_moe.hpp"
#include "mxmoe/weights.hpp"
