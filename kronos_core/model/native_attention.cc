// Causal self-attention of a CPU prefill in float32, AVX2 + FMA (kronos_core/model/native_attention.py
// builds and loads it). Per (series, head): the keys transposed once (D x L), then query blocks of 4
// rows, each scoring only the keys some row of it may see (the masked half of the square is never
// computed), a softmax by a polynomial exp, and the weighted values. What
// scaled_dot_product_attention(is_causal=True) gives, but for rounding.
#include <immintrin.h>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr int ROWS = 4;  // query rows a block

inline __m256 exp_ps(__m256 x) {
    // e^x for x <= 0: 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2]; under -87.3: 0
    const __m256 lo = _mm256_set1_ps(-87.3f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// the scores of ROWS query rows qs (scaled) against the keys of kt (D x lpad, zero past the last
// key) in 8-key vectors [0, chunks), two at a time, into s (ROWS x lpad)
template <int D>
inline void score_block(const float (*qs)[D], const float* kt, int lpad, int chunks, float* s) {
    for (int c = 0; c < chunks; c += 2) {
        // the second vector past the last chunk reads kt's zero padding; the accumulators, fully
        // unrolled, stay in registers (8 of AVX2's 16)
        __m256 lo[ROWS], hi[ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
        const float* kc = kt + c * 8;
        for (int d = 0; d < D; ++d) {
            const __m256 ka = _mm256_loadu_ps(kc + d * lpad);
            const __m256 kb = _mm256_loadu_ps(kc + d * lpad + 8);
#pragma GCC unroll 4
            for (int r = 0; r < ROWS; ++r) {
                const __m256 qr = _mm256_broadcast_ss(&qs[r][d]);
                lo[r] = _mm256_fmadd_ps(qr, ka, lo[r]);
                hi[r] = _mm256_fmadd_ps(qr, kb, hi[r]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < ROWS; ++r) {
            _mm256_storeu_ps(s + r * lpad + c * 8, lo[r]);
            _mm256_storeu_ps(s + r * lpad + c * 8 + 8, hi[r]);
        }
    }
}

// sr[0, chunks * 8) <- exp(sr - its largest); -> their sum
inline float softmax_terms(float* sr, int chunks) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    for (int c = 0; c < chunks; ++c) m = _mm256_max_ps(m, _mm256_loadu_ps(sr + c * 8));
    const __m256 tv = _mm256_set1_ps(hmax(m));
    __m256 sum = _mm256_setzero_ps();
    for (int c = 0; c < chunks; ++c) {
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(sr + c * 8), tv));
        _mm256_storeu_ps(sr + c * 8, e);
        sum = _mm256_add_ps(sum, e);
    }
    return hsum(sum);
}

// out_r[0, D) = inv[r] * sum_{j < keys} s[r][j] v_j for the block's rows (v rows at v_row)
template <int D>
inline void weigh_block(const float* s, int lpad, int keys, const float* v, int64_t v_row,
                        int rows, const float* inv, float* const* out) {
    for (int d0 = 0; d0 < D; d0 += 16) {
        __m256 o[ROWS][2];
        for (int r = 0; r < ROWS; ++r) o[r][0] = o[r][1] = _mm256_setzero_ps();
        for (int j = 0; j < keys; ++j) {
            const float* vj = v + j * v_row + d0;
            __m256 v0 = _mm256_loadu_ps(vj);
            __m256 v1 = _mm256_loadu_ps(vj + 8);
            for (int r = 0; r < ROWS; ++r) {
                __m256 p = _mm256_broadcast_ss(s + r * lpad + j);
                o[r][0] = _mm256_fmadd_ps(p, v0, o[r][0]);
                o[r][1] = _mm256_fmadd_ps(p, v1, o[r][1]);
            }
        }
        for (int r = 0; r < rows; ++r) {
            const __m256 iv = _mm256_set1_ps(inv[r]);
            _mm256_storeu_ps(out[r] + d0, _mm256_mul_ps(o[r][0], iv));
            _mm256_storeu_ps(out[r] + d0 + 8, _mm256_mul_ps(o[r][1], iv));
        }
    }
}

// keys (L x D, rows at k_row) -> kt (D x lpad), zero past L
template <int D>
inline void transpose_keys(const float* k, int64_t k_row, int L, float* kt, int lpad) {
    for (int j = 0; j < L; ++j)
        for (int d = 0; d < D; ++d) kt[d * lpad + j] = k[j * k_row + d];
    for (int d = 0; d < D; ++d)
        for (int j = L; j < lpad; ++j) kt[d * lpad + j] = 0.f;
}

// one (series, head) of causal attention: q, k, v, out rows at their row strides (elements)
template <int D>
void causal_one(const float* q, int64_t q_row, const float* k, int64_t k_row, const float* v,
                int64_t v_row, float* out, int64_t out_row, int L, float scale, float* kt,
                float* s, int lpad) {
    transpose_keys<D>(k, k_row, L, kt, lpad);
    for (int i0 = 0; i0 < L; i0 += ROWS) {
        const int rows = L - i0 < ROWS ? L - i0 : ROWS;
        const int keys = i0 + rows;         // keys [0, keys) are seen by some row of the block
        const int chunks = (keys + 7) / 8;  // 8-key vectors
        float qs[ROWS][D];
        for (int r = 0; r < ROWS; ++r)
            for (int d = 0; d < D; ++d) qs[r][d] = r < rows ? q[(i0 + r) * q_row + d] * scale : 0.f;
        score_block<D>(qs, kt, lpad, chunks, s);
        float inv[ROWS] = {0.f, 0.f, 0.f, 0.f};
        float* out_rows[ROWS];
        for (int r = 0; r < ROWS; ++r) {
            float* sr = s + r * lpad;
            out_rows[r] = out + (i0 + (r < rows ? r : 0)) * out_row;
            if (r >= rows) {  // a row past the end: no weight anywhere
                for (int j = 0; j < chunks * 8; ++j) sr[j] = 0.f;
                continue;
            }
            for (int j = i0 + r + 1; j < chunks * 8; ++j) sr[j] = -INFINITY;  // later keys
            inv[r] = 1.f / softmax_terms(sr, chunks);
        }
        weigh_block<D>(s, lpad, keys, v, v_row, rows, inv, out_rows);
    }
}

}  // namespace

extern "C" int kronos_causal_attention(
    const float* q, const float* k, const float* v, float* out, int B, int H, int L, int D,
    const int64_t* q_strides, const int64_t* k_strides, const int64_t* v_strides,
    const int64_t* out_strides, float scale) {
    // strides (batch, head, row) in elements, the last dimension contiguous; 0: done
    if (D != 16 && D != 32 && D != 64) return 1;
    const int lpad = (L + 15) / 16 * 16 + 16;
    std::vector<float> kt(static_cast<size_t>(D) * lpad), s(static_cast<size_t>(ROWS) * lpad);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h) {
            const float* qb = q + b * q_strides[0] + h * q_strides[1];
            const float* kb = k + b * k_strides[0] + h * k_strides[1];
            const float* vb = v + b * v_strides[0] + h * v_strides[1];
            float* ob = out + b * out_strides[0] + h * out_strides[1];
            if (D == 16)
                causal_one<16>(qb, q_strides[2], kb, k_strides[2], vb, v_strides[2], ob,
                               out_strides[2], L, scale, kt.data(), s.data(), lpad);
            else if (D == 32)
                causal_one<32>(qb, q_strides[2], kb, k_strides[2], vb, v_strides[2], ob,
                               out_strides[2], L, scale, kt.data(), s.data(), lpad);
            else
                causal_one<64>(qb, q_strides[2], kb, k_strides[2], vb, v_strides[2], ob,
                               out_strides[2], L, scale, kt.data(), s.data(), lpad);
        }
    return 0;
}
