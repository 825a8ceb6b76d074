// The name of the scaled-dot-product-attention kernel a transformer's attention ran (its facts'
// "attention"), from at::_fused_sdp_choice's number.
#pragma once

#include <ATen/SDPBackend.h>

#include <cstdint>
#include <string>

namespace parbench {

inline std::string sdpa_backend_name(int64_t backend) {
  switch (static_cast<at::SDPBackend>(backend)) {
    case at::SDPBackend::math: return "math";
    case at::SDPBackend::flash_attention: return "flash_attention";
    case at::SDPBackend::efficient_attention: return "efficient_attention";
    case at::SDPBackend::cudnn_attention: return "cudnn_attention";
    case at::SDPBackend::overrideable: return "overrideable";
    default: return "unknown";
  }
}

}  // namespace parbench
