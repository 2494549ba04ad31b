// The kernels as the Python module fairseq_monoattn._kernels (torch's extension API: pybind11 through
// torch/extension.h), and PendingFactors as a custom class torch knows, so that an autograd node's
// ctx->saved_data can keep one.
#include <torch/extension.h>
#include <torch/library.h>

#include "kernels.h"

TORCH_LIBRARY(fairseq_monoattn, m) { m.class_<fairseq_monoattn::PendingFactors>("PendingFactors"); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace fairseq_monoattn;
  m.doc() = "The plugin's C++ kernels (fairseq_monoattn.modules.compiled says when they run)";
  m.def("packed_gru_forward", &packed_gru_forward, "states and saved gates of a packed GRU loop (noise: added to each state)",
        pybind11::arg("input_gates"), pybind11::arg("weight"), pybind11::arg("bias"), pybind11::arg("sizes"),
        pybind11::arg("noise") = pybind11::none());
  m.def("packed_gru_backward", &packed_gru_backward, "gradients of a packed GRU loop");
  m.def("packing_plan", &packing_plan, "the step sizes and the index tensors of a packed batch (modules/gru.py)");
  m.def("gru_step", &gru_step, "one GRU update h' from its gates' pre-activations, as one autograd node");
  pybind11::class_<PendingFactors, c10::intrusive_ptr<PendingFactors>>(
      m, "PendingFactors", "the factor pairs the step nodes file for one gradient, until the collector takes them")
      .def(pybind11::init([] { return c10::make_intrusive<PendingFactors>(); }))
      .def("take", &PendingFactors::take, "the pairs filed so far (and none left)");
  m.def("step_product", &step_product, "offset + x W^T + b as one node filing (dL/dy, x)");
  m.def("step_read", &step_read, "w M (a batch of row vectors times matrices) as one node filing (w, dL/dy)");
  m.def("step_score", &step_score, "M q as one node filing (dL/ds, q)");
  m.def("softmax_gaussian", &softmax_gaussian, "the softmax focus over source positions, as one autograd node");
  m.def("mixed_focus", &mixed_focus, "a step's mix of the content and the location focus, as one autograd node",
        pybind11::arg("scores"), pybind11::arg("padding_mask"), pybind11::arg("location"), pybind11::arg("mix_logit"),
        pybind11::arg("temperature"), pybind11::arg("positions"));
  m.def("location_focus", &location_focus, "a step's location focus from its heads, as one autograd node",
        pybind11::arg("heads"), pybind11::arg("previous"), pybind11::arg("mono_gate"), pybind11::arg("positions"),
        pybind11::arg("step_size"), pybind11::arg("lengths"), pybind11::arg("padding_mask"),
        pybind11::arg("step_activation"), pybind11::arg("step_temperature"), pybind11::arg("reference"),
        pybind11::arg("step"), pybind11::arg("sigma_min"), pybind11::arg("clamp_slope"));
  m.def("decoder_loop", &decoder_loop, "the GRU decoder's whole time loop in training, as one autograd node",
        pybind11::arg("input_gates"), pybind11::arg("hidden0"), pybind11::arg("read_weight"), pybind11::arg("read_bias"),
        pybind11::arg("context_weight"), pybind11::arg("values"), pybind11::arg("keys"), pybind11::arg("mono_gate"),
        pybind11::arg("positions"), pybind11::arg("step_size"), pybind11::arg("lengths"),
        pybind11::arg("padding_mask"), pybind11::arg("readout_sizes"), pybind11::arg("step_activation"),
        pybind11::arg("step_temperature"), pybind11::arg("reference"), pybind11::arg("sigma_min"),
        pybind11::arg("clamp_slope"), pybind11::arg("mix_temperature"), pybind11::arg("location_reference"));
}
