// The kernels' equations one row at a time, each written once: the GRU update's elementwise parts
// (the encoder's packed loop and the decoder's GRU step), the masked softmax and its backward pass,
// the Gaussian focus's logits and backward pass (the softmax focus node, the location focus and the
// decoder loop), and the scalar functions they share.  Plain loops over raw numbers, no tensors.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace fairseq_monoattn {

template <typename T>
inline T scalar_sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// torch's gradient of maximum(a, b) to a (minimum: swap the comparison): all of it where a wins, half on a tie
template <typename T>
inline T share_of_max(T a, T b) {
  return a > b ? T(1) : (a == b ? T(0.5) : T(0));
}

// -- the GRU update, h' = (h - n) z + n with r = sigmoid(i_r + h_r), z = sigmoid(i_z + h_z),
//    n = tanh(i_n + r h_n).  Every array its own restrict pointer, so that the compiler vectorizes
//    the loops (with the gates as offsets of one pointer it cannot tell the stores apart and runs
//    them one number at a time).

// n before its tanh: i_n + r h_n
template <typename T>
void gru_row_candidate(const T* __restrict__ i_n, const T* __restrict__ r, const T* __restrict__ h_n, int64_t H,
                       T* __restrict__ out) {
  for (int64_t j = 0; j < H; ++j) out[j] = i_n[j] + r[j] * h_n[j];
}

// h' = (h - n) z + n
template <typename T>
void gru_row_update(const T* __restrict__ h, const T* __restrict__ n, const T* __restrict__ z, int64_t H,
                    T* __restrict__ out) {
  for (int64_t j = 0; j < H; ++j) out[j] = (h[j] - n[j]) * z[j] + n[j];
}

// The backward pass of one row: from g = dL/dh' (H numbers), dL/dh through h' itself (kept = g z)
// and the gates' pre-activation gradients, on the input side [g_r | g_z | g_n] and on the hidden
// side [g_r | g_z | g_n r].
template <typename T>
void gru_row_backward(const T* __restrict__ g, const T* __restrict__ r, const T* __restrict__ z,
                      const T* __restrict__ n, const T* __restrict__ h, const T* __restrict__ h_n, int64_t H,
                      T* __restrict__ kept, T* __restrict__ gi_r, T* __restrict__ gi_z, T* __restrict__ gi_n,
                      T* __restrict__ gh_r, T* __restrict__ gh_z, T* __restrict__ gh_n) {
  for (int64_t j = 0; j < H; ++j) {
    const T through_h = g[j] * z[j];                        // through h' = z h + (1 - z) n
    const T g_z = g[j] * (h[j] - n[j]) * (1 - z[j]) * z[j];  // through z = sigmoid(.)
    const T g_n = (g[j] - through_h) * (1 - n[j] * n[j]);   // through n = tanh(.)
    const T g_r = g_n * h_n[j] * (1 - r[j]) * r[j];         // through r = sigmoid(.)
    kept[j] = through_h;
    gi_r[j] = g_r;
    gi_z[j] = g_z;
    gi_n[j] = g_n;
    gh_r[j] = g_r;
    gh_z[j] = g_z;
    gh_n[j] = g_n * r[j];
  }
}

// -- the masked softmax over S source positions

// out = softmax(logits) over the positions not masked, 0 on the masked ones (out may be logits itself)
template <typename T>
void masked_softmax_row(const T* logits, const bool* pad, int64_t S, T* out) {
  T largest = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < S; ++j) largest = pad[j] ? largest : std::max(largest, logits[j]);
  T total = 0;
  for (int64_t j = 0; j < S; ++j) {
    out[j] = pad[j] ? T(0) : std::exp(logits[j] - largest);
    total += out[j];
  }
  for (int64_t j = 0; j < S; ++j) out[j] /= total;
}

// From the softmax w and g = dL/dw: dL/dlogits = w (g - <w, g>) into out (out may be g itself)
template <typename T>
void softmax_row_backward(const T* w, const T* g, int64_t S, T* out) {
  T expected = 0;  // <w, g>
  for (int64_t j = 0; j < S; ++j) expected += w[j] * g[j];
  for (int64_t j = 0; j < S; ++j) out[j] = w[j] * (g[j] - expected);
}

// -- the Gaussian focus, lambda = softmax(-z^2 / 2) over the real positions, z = (positions - mu) / sigma

// z and the logits -z^2 / 2 (-inf on the masked positions) of one row
template <typename T>
void gaussian_logits_row(const T* __restrict__ positions, const bool* __restrict__ pad, T mu, T sigma, int64_t S,
                         T* __restrict__ z, T* __restrict__ logits) {
  const T minus_infinity = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < S; ++j) {
    const T zj = (positions[j] - mu) / sigma;
    z[j] = zj;
    logits[j] = pad[j] ? minus_infinity : T(-0.5) * zj * zj;
  }
}

// The backward pass of one row, from g = dL/dlambda: dL/dl through the softmax (into scratch, S
// numbers; scratch may be g itself), then dL/dmu = sum dL/dl z / sigma and dL/dsigma = sum dL/dl z^2 / sigma.
template <typename T>
void gaussian_focus_backward_row(const T* w, const T* z, const T* g, T sigma, int64_t S, T* scratch, T& grad_mu,
                                 T& grad_sigma) {
  softmax_row_backward(w, g, S, scratch);
  T along = 0, along_z = 0;  // sum of dL/dl z and of dL/dl z^2
  for (int64_t j = 0; j < S; ++j) {
    along += scratch[j] * z[j];
    along_z += scratch[j] * z[j] * z[j];
  }
  grad_mu = along / sigma;
  grad_sigma = along_z / sigma;
}

}  // namespace fairseq_monoattn
