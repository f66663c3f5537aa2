// Attention of every Pass of a merged forward in one call, read where the keys and values
// live (CPU, float32): search.runtime.kernel builds it and documents it.
//
// Each query row (a Pass's row b, its query token t) is computed by itself, per head: the
// scores over the parts its slot reads, then over its own slab columns that its mask shows,
// their max, exp(score - max), their sum and the values weighted by them, each in a fixed
// order of the same vector code. So a row's bits depend on its own inputs alone: not on the
// other rows and Passes of the call, nor on how many threads split the rows.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t W = Vec::size();

// sum_u a[u] b[u]: Vec lanes, then the lanes summed pairwise, then a scalar tail
inline float dot(const float* a, const float* b, int64_t d) {
  Vec s(0.f);
  int64_t u = 0;
  for (; u + W <= d; u += W) s = at::vec::fmadd(Vec::loadu(a + u), Vec::loadu(b + u), s);
  float lanes[W];
  s.store(lanes);
  for (int64_t w = W / 2; w > 0; w /= 2)
    for (int64_t j = 0; j < w; ++j) lanes[j] += lanes[j + w];
  float out = lanes[0];
  for (; u < d; ++u) out += a[u] * b[u];
  return out;
}

// acc[u] += p v[u]
inline void axpy(float* acc, float p, const float* v, int64_t d) {
  const Vec pv(p);
  int64_t u = 0;
  for (; u + W <= d; u += W) at::vec::fmadd(pv, Vec::loadu(v + u), Vec::loadu(acc + u)).store(acc + u);
  for (; u < d; ++u) acc[u] += p * v[u];
}

// s[0..n) = exp(s - m), every element by the same vector code (a short tail padded)
inline float exp_sum(float* s, int64_t n, float m) {
  const Vec vm(m);
  float z = 0.f;
  for (int64_t t = 0; t < n; t += W) {
    const int64_t k = std::min(W, n - t);
    (Vec::loadu(s + t, k) - vm).exp_u20().store(s + t, k);
    for (int64_t j = 0; j < k; ++j) z += s[t + j];
  }
  return z;
}

struct Keys {  // one key/value head's keys or values: rows of d floats `step` apart
  const float* at;
  int64_t step;
};

// qk [N, H + KV, d]: the rotated q|k heads of every Pass's tokens, row-major by Pass, row,
// token. Pass i: rows[i] rows of q[i] tokens after n[i] columns; slabs[i] [L, 2, slots, KV,
// capacity, d] (its rows: the first rows[i] slots; layer li's columns 0 .. n[i] + q[i]);
// masks[i] [rows, 1, q or 1, n + q] bool (which of its own columns a token sees);
// parts[part_start[i] .. part_start[i + 1]) [L, 2, KV, S, d], every token of the slots in
// readers[j] ([k] long; empty: every slot) sees all of part j. -> [N, H d] float32.
at::Tensor attend(const at::Tensor& qk, int64_t H, int64_t KV, double scale, int64_t li,
                  at::IntArrayRef rows, at::IntArrayRef q, at::IntArrayRef n,
                  at::TensorList slabs, at::TensorList masks, at::TensorList parts,
                  at::TensorList readers, at::IntArrayRef part_start) {
  const int64_t P = rows.size();
  TORCH_CHECK(qk.dim() == 3 && qk.scalar_type() == at::kFloat && qk.stride(2) == 1 &&
              qk.size(1) == H + KV && H % KV == 0, "attend: qk must be [N, H + KV, d] float32");
  TORCH_CHECK((int64_t)q.size() == P && (int64_t)n.size() == P && (int64_t)slabs.size() == P &&
              (int64_t)masks.size() == P && (int64_t)part_start.size() == P + 1 &&
              part_start[P] == (int64_t)parts.size() && parts.size() == readers.size(),
              "attend: one rows, q, n, slab and mask a Pass, one reader list a part");
  const int64_t N = qk.size(0), d = qk.size(2), g = H / KV;
  std::vector<int64_t> pass_of, slot_base(P + 1, 0);  // a query row's Pass; a Pass's first slot
  for (int64_t i = 0; i < P; ++i) {
    const auto& s = slabs[i];
    const auto& m = masks[i];
    TORCH_CHECK(s.dim() == 6 && s.scalar_type() == at::kFloat && s.stride(5) == 1 &&
                s.size(3) == KV && s.size(5) == d && li < s.size(0) && rows[i] <= s.size(2) &&
                n[i] + q[i] <= s.size(4), "attend: slab ", i, " does not hold its Pass");
    TORCH_CHECK(m.dim() == 4 && m.scalar_type() == at::kBool && m.size(0) == rows[i] &&
                (m.size(2) == 1 || m.size(2) == q[i]) && m.size(3) == n[i] + q[i],
                "attend: mask ", i, " must be [rows, 1, q or 1, n + q] bool");
    pass_of.insert(pass_of.end(), rows[i] * q[i], i);
    slot_base[i + 1] = slot_base[i] + rows[i];
  }
  TORCH_CHECK((int64_t)pass_of.size() == N, "attend: qk has ", N, " rows, the Passes ",
              pass_of.size());
  std::vector<std::vector<int64_t>> reads(slot_base[P]);  // per slot: the parts it reads
  for (int64_t i = 0; i < P; ++i)
    for (int64_t j = part_start[i]; j < part_start[i + 1]; ++j) {
      const auto& kv = parts[j];
      const auto& who = readers[j];
      TORCH_CHECK(kv.dim() == 5 && kv.scalar_type() == at::kFloat && kv.stride(4) == 1 &&
                  kv.size(2) == KV && kv.size(4) == d && li < kv.size(0),
                  "attend: part ", j, " must be [L, 2, KV, S, d] float32");
      TORCH_CHECK(who.dim() == 1 && who.scalar_type() == at::kLong && who.is_contiguous(),
                  "attend: readers must be [k] long");
      const int64_t* w = who.data_ptr<int64_t>();
      for (int64_t b = 0; b < rows[i]; ++b)
        if (who.numel() == 0 || std::find(w, w + who.numel(), b) != w + who.numel())
          reads[slot_base[i] + b].push_back(j);
    }
  auto out = at::empty({N, H * d}, qk.options());
  const float* q0 = qk.data_ptr<float>();
  float* o0 = out.data_ptr<float>();
  const float fscale = (float)scale;
  std::vector<int64_t> first(P + 1, 0);  // a Pass's first query row
  for (int64_t i = 0; i < P; ++i) first[i + 1] = first[i] + rows[i] * q[i];
  int64_t work = 1;  // the multiply-adds of a call, to split it across threads
  for (int64_t i = 0; i < P; ++i) work += rows[i] * q[i] * (n[i] + q[i]);
  const int64_t grain = std::max<int64_t>(1, N * 32768 / (work * H * d));
  at::parallel_for(0, N, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> sc, acc(d);
    std::vector<int64_t> seen;  // the own columns a token sees
    std::vector<Keys> keys, values;  // what a token reads, per key/value head offset 0
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = pass_of[r], within = r - first[i], b = within / q[i], t = within % q[i];
      const auto& slab = slabs[i];
      const auto& m = masks[i];
      const int64_t T = n[i] + q[i];
      const bool* mp = m.data_ptr<bool>() + b * m.stride(0) + (m.size(2) == 1 ? 0 : t * m.stride(2));
      seen.clear();
      for (int64_t c = 0; c < T; ++c)
        if (mp[c * m.stride(3)]) seen.push_back(c);
      keys.clear();
      values.clear();
      int64_t total = seen.size();
      for (int64_t j : reads[slot_base[i] + b]) {
        const auto& kv = parts[j];
        const float* base = kv.data_ptr<float>() + li * kv.stride(0);
        for (int64_t s = 0; s < kv.size(3); ++s) {
          keys.push_back({base + s * kv.stride(3), kv.stride(2)});
          values.push_back({base + kv.stride(1) + s * kv.stride(3), kv.stride(2)});
        }
        total += kv.size(3);
      }
      const float* own = slab.data_ptr<float>() + li * slab.stride(0) + b * slab.stride(2);
      for (int64_t c : seen) {
        keys.push_back({own + c * slab.stride(4), slab.stride(3)});
        values.push_back({own + slab.stride(1) + c * slab.stride(4), slab.stride(3)});
      }
      TORCH_CHECK(total > 0, "attend: a query token of Pass ", i, " sees no column");
      sc.resize(total + W);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kvh = h / g;
        const float* qv = q0 + r * qk.stride(0) + h * qk.stride(1);
        float mx = -INFINITY;
        for (int64_t u = 0; u < total; ++u) {
          sc[u] = dot(qv, keys[u].at + kvh * keys[u].step, d) * fscale;
          mx = std::max(mx, sc[u]);
        }
        const float z = exp_sum(sc.data(), total, mx);
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t u = 0; u < total; ++u) axpy(acc.data(), sc[u], values[u].at + kvh * values[u].step, d);
        float* o = o0 + r * H * d + h * d;
        for (int64_t u = 0; u < d; ++u) o[u] = acc[u] / z;
      }
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(tts, CPU, m) { m.impl("attend", &attend); }
