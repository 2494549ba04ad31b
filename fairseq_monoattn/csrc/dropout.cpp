// Dropout's scale from random bytes (modules/dropout.py): element i is kept, scaled by 1 / (1 - p),
// where byte_i >= 256 p, and dropped otherwise.  torch makes it in three passes over the batch (ge,
// to and mul_: about 70 us for a batch of 32 x 14 x 128 encodings here); this is one, with the same
// numbers: the kept elements hold 1 / (1 - p) rounded to the dtype, as mul_ rounds its scalar.

#include "kernels.h"

namespace fairseq_monoattn {

at::Tensor dropout_scale(const at::Tensor& random_bytes_in, int64_t threshold, double scale, at::ScalarType dtype) {
  TORCH_CHECK(random_bytes_in.device().is_cpu() && random_bytes_in.scalar_type() == at::kByte,
              "dropout_scale: random_bytes must be a CPU tensor of uint8");
  TORCH_CHECK(threshold > 0 && threshold < 256, "dropout_scale: threshold must be in 1 .. 255, not ", threshold);
  const at::Tensor random_bytes = random_bytes_in.contiguous();
  at::Tensor out = at::empty(random_bytes.sizes(), random_bytes.options().dtype(dtype));
  const int64_t count = random_bytes.numel();
  const uint8_t* bytes = random_bytes.const_data_ptr<uint8_t>();
  AT_DISPATCH_FLOATING_TYPES(dtype, "dropout_scale", [&] {
    const scalar_t kept = static_cast<scalar_t>(scale);
    scalar_t* o = out.data_ptr<scalar_t>();
    for (int64_t i = 0; i < count; ++i) o[i] = bytes[i] >= threshold ? kept : scalar_t(0);
  });
  return out;
}

}  // namespace fairseq_monoattn
