#include <torch/extension.h>

#include "kernels.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace fairseq_monoattn;
  m.doc() = "The plugin's C++ kernels (fairseq_monoattn.modules.compiled says when they run)";
  m.def("packed_gru_forward", &packed_gru_forward, "states and saved gates of a packed GRU loop");
  m.def("packed_gru_backward", &packed_gru_backward, "gradients of a packed GRU loop");
  m.def("gru_step", &gru_step, "one GRU update h' from its gates' pre-activations, as one autograd node");
  m.def("softmax_gaussian", &softmax_gaussian, "the softmax focus over source positions, as one autograd node");
}
