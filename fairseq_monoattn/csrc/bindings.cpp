#include <torch/extension.h>

#include "kernels.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace fairseq_monoattn;
  m.doc() = "The plugin's C++ kernels (fairseq_monoattn.modules.compiled says when they run)";
  m.def("packed_gru_forward", &packed_gru_forward, "states and saved gates of a packed GRU loop");
  m.def("packed_gru_backward", &packed_gru_backward, "gradients of a packed GRU loop");
  m.def("gru_step", &gru_step, "one GRU update h' from its gates' pre-activations, as one autograd node");
  pybind11::class_<PendingFactors, std::shared_ptr<PendingFactors>>(
      m, "PendingFactors", "the factor pairs the step nodes file for one gradient, until the collector takes them")
      .def(pybind11::init<>())
      .def("take",
           [](PendingFactors& self) {
             auto pairs = std::move(self.pairs);
             self.pairs.clear();
             return pairs;
           });
  m.def("step_product", &step_product, "offset + x W^T + b as one node filing (dL/dy, x)");
  m.def("step_read", &step_read, "w M (a batch of row vectors times matrices) as one node filing (w, dL/dy)");
  m.def("step_score", &step_score, "M q as one node filing (dL/ds, q)");
  m.def("softmax_gaussian", &softmax_gaussian, "the softmax focus over source positions, as one autograd node");
}
