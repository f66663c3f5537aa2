// Attention of every Pass of a merged forward in one call, read where the keys and values
// live (CPU, float32): search.runtime.kernel builds it and documents it.
//
// Each query row (a Pass's row b, its query token t) is computed by itself, per head: the
// scores over the pool blocks its slot's table names, then over its own columns that its
// mask shows, their max, exp(score - max), their sum and the values weighted by them, each
// in a fixed order of the same vector code. So a row's bits depend on its own inputs alone:
// not on the other rows and Passes of the call, nor on how many threads split the rows. The
// query heads of one key/value head (grouped-query attention) are computed together: each
// block of keys and each value vector read once for the group, each head's sums in the
// order it has alone.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t W = Vec::size();

static_assert(W == 8, "the column blocks below are 8 wide");

// 8 keys' or values' elements as float32 (fp16 widened exactly: the math is float32 either way)
inline Vec load8(const float* p) { return Vec::loadu(p); }
inline Vec load8(const at::Half* p) {
#if defined(__F16C__)
  return Vec(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#else
  float x[8];
  for (int j = 0; j < 8; ++j) x[j] = static_cast<float>(p[j]);
  return Vec::loadu(x);
#endif
}

// The helpers below always inlined: called for several head counts, the compiler may
// otherwise leave one out of line (~10% slower)
#define INLINE [[gnu::always_inline]] inline

// out[j] = scale (q . k[j]) for 8 columns: each column's 8 lanes of products summed
// ((0+1)+(2+3))+((4+5)+(6+7)), then a scalar tail over d's last d % 8 dimensions
template <typename T>
INLINE void scores8(const float* q, const T* const* k, int64_t d, float scale, float* out) {
  Vec acc[8] = {Vec(0.f), Vec(0.f), Vec(0.f), Vec(0.f), Vec(0.f), Vec(0.f), Vec(0.f), Vec(0.f)};
  int64_t u = 0;
  for (; u + W <= d; u += W) {
    const Vec qv = Vec::loadu(q + u);
    for (int j = 0; j < 8; ++j) acc[j] = at::vec::fmadd(qv, load8(k[j] + u), acc[j]);
  }
#if defined(__AVX2__)
  const __m256 t0 = _mm256_hadd_ps(acc[0], acc[1]), t1 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 t2 = _mm256_hadd_ps(acc[4], acc[5]), t3 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                      _mm256_permute2f128_ps(u0, u1, 0x31)));
#else
  for (int j = 0; j < 8; ++j) {
    float x[8];
    acc[j].store(x);
    out[j] = ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7]));
  }
#endif
  for (int j = 0; j < 8; ++j) {
    for (int64_t r = u; r < d; ++r) out[j] += q[r] * static_cast<float>(k[j][r]);
    out[j] *= scale;
  }
}

// For NH query heads of one key/value head: o[h]'s blocks of C vectors from u on =
// sum_t p[h][t] v[t] / z[h], over t in order (one FMA chain an element, each head's the same
// as alone; a value vector loaded once for the NH heads), while a whole block fits -> where
// it stopped. sum: z[h] is still to be summed (+= p[h][t], t in order): the first block does
// it beside its chains (the two latency chains run side by side), then clears sum.
template <int NH, int C, typename T>
INLINE int64_t chains(const float* const* heads, const T* const* v, int64_t n, int64_t d,
                      float* z, float* const* o, int64_t u, bool& sum) {
  const float* p[NH];  // (a copy the compiler keeps in registers)
  for (int h = 0; h < NH; ++h) p[h] = heads[h];
  for (; u + C * W <= d; u += C * W) {
    Vec a[NH][C];
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < C; ++c) a[h][c] = Vec(0.f);
    float zs[NH];
    for (int h = 0; h < NH; ++h) zs[h] = z[h];
    for (int64_t t = 0; t < n; ++t) {
      Vec pt[NH];
      for (int h = 0; h < NH; ++h) pt[h] = Vec(p[h][t]);
      if (sum)
        for (int h = 0; h < NH; ++h) zs[h] += p[h][t];
      for (int c = 0; c < C; ++c) {
        const Vec x = load8(v[t] + u + c * W);
        for (int h = 0; h < NH; ++h) a[h][c] = at::vec::fmadd(pt[h], x, a[h][c]);
      }
    }
    for (int h = 0; h < NH; ++h) z[h] = zs[h];
    sum = false;
    for (int h = 0; h < NH; ++h)
      for (int c = 0; c < C; ++c) (a[h][c] / Vec(z[h])).store(o[h] + u + c * W);
  }
  return u;
}

// o[h][0..d) = sum_t p[h][t] v[t] / z[h], z[h] = sum_t p[h][t], for NH heads of one
// key/value head (blocks of vectors as many as the registers hold; then one vector at a
// time; then a scalar tail)
template <int NH, typename T>
INLINE void weighted(const float* const* p, const T* const* v, int64_t n, int64_t d,
                     float* const* o) {
  constexpr int C = NH <= 2 ? 4 : 2;
  float z[NH] = {};
  bool sum = true;
  const int64_t u0 = chains<NH, 1>(p, v, n, d, z, o, chains<NH, C>(p, v, n, d, z, o, 0, sum), sum);
  for (int h = 0; h < NH && sum; ++h)  // (no whole vector in d)
    for (int64_t t = 0; t < n; ++t) z[h] += p[h][t];
  for (int h = 0; h < NH; ++h)
    for (int64_t u = u0; u < d; ++u) {
      float acc = 0.f;
      for (int64_t t = 0; t < n; ++t) acc += p[h][t] * static_cast<float>(v[t][u]);
      o[h][u] = acc / z[h];
    }
}

// s[0..n) = exp(s - m), every element by the same vector code (a short tail padded)
inline void exps(float* s, int64_t n, float m) {
  const Vec vm(m);
  for (int64_t t = 0; t < n; t += W) {
    const int64_t k = std::min(W, n - t);
    (Vec::loadu(s + t, k) - vm).exp_u20().store(s + t, k);
  }
}

// A KV pool's chunks ([C, L, 2, KV, BS, d] each, contiguous, all alike): block g is row
// g % C of chunk g / C. Refuses chunks of another shape or element type.
struct Pool {
  at::TensorList chunks;
  int64_t C = 1, BS = 0;
  Pool(at::TensorList p, at::ScalarType type, int64_t KV, int64_t d, int64_t li) : chunks(p) {
    C = p.empty() ? 1 : p[0].size(0);
    BS = p.empty() ? 0 : p[0].size(4);
    for (const auto& c : p)
      TORCH_CHECK(c.dim() == 6 && c.scalar_type() == type && c.is_contiguous() &&
                  c.size(0) == C && c.size(3) == KV && c.size(4) == BS && c.size(5) == d &&
                  li < c.size(1), "tts: pool chunks must be [C, L, 2, KV, BS, d] of the KV's "
                  "dtype, contiguous, all alike");
  }
  int64_t blocks() const { return C * (int64_t)chunks.size(); }
  // layer li's key of column c (key/value head 0) of block g
  template <typename E>
  E* column(int64_t g, int64_t li, int64_t c) const {
    const auto& ch = chunks[g / C];
    return ch.data_ptr<E>() + (g % C) * ch.stride(0) + li * ch.stride(1) + c * ch.stride(4);
  }
  int64_t value() const { return chunks[0].stride(2); }  // key -> value
  int64_t col() const { return chunks[0].stride(4); }
  int64_t head() const { return chunks[0].stride(3); }
};

// Refuses Pass i's own-block table (owns[i] [rows, R] int64: column c of slot b in block
// owns[i][b][c / BS], at c % BS) if it does not cover its columns or names a block outside
// the pool.
inline void check_owns(at::TensorList owns, int64_t i, int64_t rows, int64_t columns,
                       const Pool& pool) {
  const auto& o = owns[i];
  TORCH_CHECK(o.dim() == 2 && o.scalar_type() == at::kLong && o.is_contiguous() &&
              o.size(0) == rows && o.size(1) * pool.BS >= columns, "tts: the own blocks of Pass ",
              i, " must be [rows, R] int64 covering its columns");
  const int64_t* e = o.data_ptr<int64_t>();
  for (int64_t u = 0; u < o.numel(); ++u)
    TORCH_CHECK(0 <= e[u] && e[u] < pool.blocks(), "tts: Pass ", i,
                " owns a block outside the pool");
}

// n columns of a block: the first one's key and value (key/value head 0), the step
// to the next column and to the next key/value head
template <typename E>
struct Run {
  const E* k;
  const E* v;
  int64_t n, col, head;
};

// qk [N, H + KV, d]: the rotated q|k heads of every Pass's tokens, row-major by Pass, row,
// token. Pass i: rows[i] rows of q[i] tokens after n[i] columns of their own, in their own
// pool blocks (owns[i]: see check_owns); masks[i] [rows, 1, q or 1, n + q] bool (which of its
// own columns a token sees). Before its own columns, row b of Pass i reads the blocks of its
// block table, tables[i][b] ([E, 2] int64: a block's id and the columns it fills, in order
// up to the first id < 0): block g is row g % C of pool[g / C] ([C, L, 2, KV, BS, d] each,
// of element type E: attend picks it). -> [N, H d] float32.
template <typename E>
at::Tensor attend_t(const at::Tensor& qk, int64_t H, int64_t KV, double scale, int64_t li,
                    at::IntArrayRef rows, at::IntArrayRef q, at::IntArrayRef n,
                    at::TensorList masks, at::TensorList pool, at::TensorList tables,
                    at::TensorList owns) {
  const int64_t P = rows.size();
  TORCH_CHECK(qk.dim() == 3 && qk.scalar_type() == at::kFloat && qk.stride(2) == 1 &&
              qk.size(1) == H + KV && H % KV == 0, "attend: qk must be [N, H + KV, d] float32");
  TORCH_CHECK((int64_t)q.size() == P && (int64_t)n.size() == P && (int64_t)masks.size() == P &&
              (int64_t)tables.size() == P && (int64_t)owns.size() == P,
              "attend: one rows, q, n, mask, block table and own-block table a Pass");
  const int64_t N = qk.size(0), d = qk.size(2), g = H / KV;
  const auto kv_type = c10::CppTypeToScalarType<E>::value;
  std::vector<int64_t> pass_of;  // a query row's Pass
  std::vector<int64_t> first(P + 1, 0);  // a Pass's first query row
  int64_t work = 1;  // the multiply-adds of a call, to split it across threads
  const Pool blocks(pool, kv_type, KV, d, li);
  for (int64_t i = 0; i < P; ++i) {
    const auto& m = masks[i];
    const auto& t = tables[i];
    check_owns(owns, i, rows[i], n[i] + q[i], blocks);
    TORCH_CHECK(m.dim() == 4 && m.scalar_type() == at::kBool && m.size(0) == rows[i] &&
                (m.size(2) == 1 || m.size(2) == q[i]) && m.size(3) == n[i] + q[i],
                "attend: mask ", i, " must be [rows, 1, q or 1, n + q] bool");
    TORCH_CHECK(t.dim() == 3 && t.scalar_type() == at::kLong && t.is_contiguous() &&
                t.size(0) == rows[i] && t.size(2) == 2,
                "attend: table ", i, " must be [rows, E, 2] int64, contiguous");
    const int64_t* e = t.data_ptr<int64_t>();
    for (int64_t u = 0; u < t.size(0) * t.size(1); ++u)
      TORCH_CHECK(e[2 * u] < blocks.blocks() &&
                  (e[2 * u] < 0 || (0 <= e[2 * u + 1] && e[2 * u + 1] <= blocks.BS)),
                  "attend: table ", i, " holds a block outside the pool or a fill outside "
                  "its block");
    pass_of.insert(pass_of.end(), rows[i] * q[i], i);
    first[i + 1] = first[i] + rows[i] * q[i];
    work += rows[i] * q[i] * (n[i] + q[i]);
  }
  TORCH_CHECK((int64_t)pass_of.size() == N, "attend: qk has ", N, " rows, the Passes ",
              pass_of.size());
  auto out = at::empty({N, H * d}, qk.options());
  const float* q0 = qk.data_ptr<float>();
  float* o0 = out.data_ptr<float>();
  const float fscale = (float)scale;
  const int64_t grain = std::max<int64_t>(1, N * 32768 / (work * H * d));
  at::parallel_for(0, N, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> sc;
    // what a token reads: runs of columns (a block's, or own columns its mask shows one
    // after another within a block), each from its key and value at key/value head 0; a
    // head's pointers
    std::vector<Run<E>> runs;
    std::vector<const E*> kp, vp;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = pass_of[r], within = r - first[i], b = within / q[i], t = within % q[i];
      const auto& m = masks[i];
      const int64_t T = n[i] + q[i], ms = m.stride(3);
      const bool* mp = m.data_ptr<bool>() + b * m.stride(0) + (m.size(2) == 1 ? 0 : t * m.stride(2));
      runs.clear();
      const int64_t* te = tables[i].data_ptr<int64_t>() + b * tables[i].stride(0);
      for (int64_t u = 0; u < tables[i].size(1) && te[2 * u] >= 0; ++u) {
        const E* base = blocks.column<E>(te[2 * u], li, 0);
        runs.push_back({base, base + blocks.value(), te[2 * u + 1], blocks.col(), blocks.head()});
      }
      const int64_t BS = blocks.BS, R = owns[i].size(1);
      const int64_t* ow = owns[i].data_ptr<int64_t>() + b * R;
      for (int64_t c = 0, e; c < T; c = e) {
        if (!mp[c * ms]) {
          e = c + 1;
          continue;
        }
        for (e = c + 1; e < T && mp[e * ms]; ++e) {}
        for (int64_t s = c, f; s < e; s = f) {  // (a run within one block)
          f = std::min(e, (s / BS + 1) * BS);
          const E* p0 = blocks.column<E>(ow[s / BS], li, s % BS);
          runs.push_back({p0, p0 + blocks.value(), f - s, blocks.col(), blocks.head()});
        }
      }
      int64_t total = 0;
      for (const auto& run : runs) total += run.n;
      const int64_t padded = (total + 7) / 8 * 8;
      TORCH_CHECK(total > 0, "attend: a query token of Pass ", i, " sees no column");
      sc.resize(g * padded);
      kp.resize(padded);
      vp.resize(total);
      for (int64_t kvh = 0; kvh < KV; ++kvh) {  // its g query heads: h = kvh g + e
        int64_t u = 0;
        for (const auto& run : runs) {
          const E* k = run.k + kvh * run.head;
          const E* v = run.v + kvh * run.head;
          for (int64_t s = 0; s < run.n; ++s, ++u) {
            kp[u] = k + s * run.col;
            vp[u] = v + s * run.col;
          }
        }
        for (; u < padded; ++u) kp[u] = kp[0];  // (a last block padded with column 0)
        const float* qv = q0 + r * qk.stride(0) + kvh * g * qk.stride(1);
        for (int64_t u = 0; u < padded; u += 8)  // 8 keys read once for the g heads
          for (int64_t e = 0; e < g; ++e)
            scores8(qv + e * qk.stride(1), kp.data() + u, d, fscale,
                    sc.data() + e * padded + u);
        for (int64_t e0 = 0; e0 < g; e0 += 4) {  // up to 4 heads at once read each value
          const int64_t nh = std::min<int64_t>(4, g - e0);
          const float* p[4];
          float* o[4];
          for (int64_t e = 0; e < nh; ++e) {
            float* s = sc.data() + (e0 + e) * padded;
            exps(s, total, *std::max_element(s, s + total));
            p[e] = s;
            o[e] = o0 + r * H * d + (kvh * g + e0 + e) * d;
          }
          if (nh == 1) weighted<1>(p, vp.data(), total, d, o);
          else if (nh == 2) weighted<2>(p, vp.data(), total, d, o);
          else if (nh == 3) weighted<3>(p, vp.data(), total, d, o);
          else weighted<4>(p, vp.data(), total, d, o);
        }
      }
    }
  });
  return out;
}

// attend_t for the pool's element type: float32, or float16 (widened as it is read)
at::Tensor attend(const at::Tensor& qk, int64_t H, int64_t KV, double scale, int64_t li,
                  at::IntArrayRef rows, at::IntArrayRef q, at::IntArrayRef n,
                  at::TensorList masks, at::TensorList pool, at::TensorList tables,
                  at::TensorList owns) {
  const bool half = !pool.empty() && pool[0].scalar_type() == at::kHalf;
  return (half ? attend_t<at::Half> : attend_t<float>)(qk, H, KV, scale, li, rows, q, n, masks,
                                                       pool, tables, owns);
}

// d float32 elements into a pool column: copied, or rounded to float16
template <typename E>
inline void put(const float* src, int64_t d, E* dst) {
  for (int64_t u = 0; u < d; ++u) dst[u] = static_cast<E>(src[u]);
}

// Pass i's rows' new keys and values (k, v rows r0 ..) into its own pool blocks (own
// [rows, R]), of element type E
template <typename E>
void write_owned(const at::Tensor& k, const at::Tensor& v, int64_t li, int64_t rows, int64_t q,
                 int64_t n, const at::Tensor& own, const Pool& pool, int64_t r0) {
  const float* k0 = k.data_ptr<float>();
  const float* v0 = v.data_ptr<float>();
  const int64_t KV = k.size(1), d = k.size(2), R = own.size(1);
  const int64_t* ow = own.data_ptr<int64_t>();
  int64_t r = r0;
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t t = 0; t < q; ++t, ++r) {
      const int64_t c = n + t;
      E* col = pool.column<E>(ow[b * R + c / pool.BS], li, c % pool.BS);
      for (int64_t h = 0; h < KV; ++h) {
        put(k0 + r * k.stride(0) + h * k.stride(1), d, col + h * pool.head());
        put(v0 + r * v.stride(0) + h * v.stride(1), d, col + pool.value() + h * pool.head());
      }
    }
}

// k, v [N, KV, d] float32 (any strides but the last): every Pass's new keys and values,
// row-major by Pass, row, token (as attend's qk) -> written into layer li of the pool (float32,
// or float16: rounded), Pass i's at columns n[i] .. n[i] + q[i] of its rows' own blocks
// (owns[i]: see check_owns): one call for every Pass.
void write_kv(const at::Tensor& k, const at::Tensor& v, int64_t li, at::IntArrayRef rows,
              at::IntArrayRef q, at::IntArrayRef n, at::TensorList pool, at::TensorList owns) {
  const int64_t P = rows.size();
  TORCH_CHECK(k.dim() == 3 && v.sizes() == k.sizes() && k.scalar_type() == at::kFloat &&
              v.scalar_type() == at::kFloat && k.stride(2) == 1 && v.stride(2) == 1,
              "write: k and v must be [N, KV, d] float32, the same shape");
  TORCH_CHECK((int64_t)q.size() == P && (int64_t)n.size() == P && (int64_t)owns.size() == P,
              "write: one rows, q, n and own-block table a Pass");
  const int64_t KV = k.size(1), d = k.size(2);
  const auto type = pool.empty() ? at::kFloat : pool[0].scalar_type();
  TORCH_CHECK(type == at::kFloat || type == at::kHalf, "write: KV must be float32 or float16");
  const Pool blocks(pool, type, KV, d, li);
  int64_t N = 0;
  for (int64_t i = 0; i < P; ++i) {
    check_owns(owns, i, rows[i], n[i] + q[i], blocks);
    N += rows[i] * q[i];
  }
  TORCH_CHECK(N == k.size(0), "write: k has ", k.size(0), " rows, the Passes ", N);
  const bool half = type == at::kHalf;
  for (int64_t i = 0, r = 0; i < P; r += rows[i] * q[i], ++i)
    (half ? write_owned<at::Half> : write_owned<float>)(k, v, li, rows[i], q[i], n[i], owns[i],
                                                        blocks, r);
}

}  // namespace

TORCH_LIBRARY_IMPL(tts, CPU, m) {
  m.impl("attend", &attend);
  m.impl("write", &write_kv);
}
