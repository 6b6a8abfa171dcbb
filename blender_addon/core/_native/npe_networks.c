/* The networks compiled (decoder, universal edit) and the whole refinement run.
 * Part of npe_native.c's single translation unit (included there, not compiled alone). */
/* ---- The decoder, compiled --------------------------------------------------------------
 * A model set's decoder as its graph runs it (latent -> dense -> LayerNorm -> ReLU -> dense
 * -> LayerNorm -> ReLU -> dense -> * scale + mean), in float32, with its Jacobian along the
 * refinement's basis carried forward through the layers (training/jacobian.py's rules): in
 * onnxruntime the Jacobian graph's hundred-odd nodes and each decode's call cost more than
 * their arithmetic. The loader (compiled_decoder.py) reads the weights from the set's
 * decoder.onnx and checks this against onnxruntime before using it.
 *
 * Every loop runs along independent outputs or tangent columns (no reassociated sums). On
 * processors with AVX2 and FMA the same code runs 8 floats a register with fused
 * multiply-adds (rounded once, as onnxruntime's own kernels there): a few units in the last
 * place from the plain build's, on the machine's every call alike. */

/* Multiply-adds fused where the target has them (the AVX2 code, arm64), in the decoder's
 * float32 alone: the double-precision kernels round as numpy does. */
#pragma clang fp contract(fast)

#define DECODER_MAX_WIDTH 1024
#define TANGENT_BLOCK 32 /* tangent columns per register block: the padded rank's step */
#define DECODER_MAX_TANGENTS 64

/* A stack of three dense layers, LayerNorm and ReLU after the first two (the networks'
 * shape: training/nets.py). */
typedef struct {
    int64_t n_in, hidden1, hidden2, n_out;
    double eps1, eps2;
    const float *w1t;   /* (n_in x hidden1): the first layer's weights, transposed */
    const float *b1, *gain1, *bias1;
    const float *w2;    /* (hidden2 x hidden1) */
    const float *w2t;   /* (hidden1 x hidden2) */
    const float *b2, *gain2, *bias2;
    const float *w3;    /* (n_out x hidden2) */
    const float *w3t;   /* (hidden2 x n_out) */
    const float *b3;
} NpeMlp;

/* The decoder: its layers, the output's scale and mean (the pose normalization), and the
 * refinement's basis carried through the first layer. */
typedef struct {
    NpeMlp mlp;
    int64_t rank, rank_padded;
    const float *scale, *mean;  /* (n_out) */
    const float *w1_basis; /* (hidden1 x rank_padded): W1 times the basis' rows, 0 past rank */
    const float *w2_mean;  /* (hidden1): the second layer's column means */
} NpeDecoder;

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* y (m) = W x + b, W given transposed (n x m, each row padded to a multiple of DENSE_PAD
 * outputs, as b): BLOCK outputs at a time, summed in registers along x, or along its
 * entries listed in open (those the ReLU left open: the others are 0). */
#define DENSE_PAD 64
#define DENSE(BLOCK)                                                                       \
    int64_t mp = (m + DENSE_PAD - 1) / DENSE_PAD * DENSE_PAD;                              \
    for (int64_t i0 = 0; i0 < m; i0 += BLOCK) {                                            \
        float acc[BLOCK];                                                                  \
        for (int k = 0; k < BLOCK; k++) acc[k] = b[i0 + k];                                \
        int64_t count = open ? n_open : n;                                                 \
        for (int64_t a = 0; a < count; a++) {                                              \
            int64_t j = open ? open[a] : a;                                                \
            float xj = x[j];                                                               \
            const float *w = wt + j * mp + i0;                                             \
            for (int k = 0; k < BLOCK; k++) acc[k] += w[k] * xj;                           \
        }                                                                                  \
        int64_t rows = m - i0 < BLOCK ? m - i0 : BLOCK;                                    \
        memcpy(y + i0, acc, sizeof(float) * (size_t)rows);                                 \
    }

#define DENSE_ARGS int64_t m, int64_t n, const float *wt, const float *b, const float *x, \
    float *y, const int32_t *open, int64_t n_open

#if defined(__x86_64__) || defined(_M_X64) /* the plain build: 16 vector registers */
ALWAYS_INLINE void dense32(DENSE_ARGS) { DENSE(32) }
#endif
ALWAYS_INLINE void dense64(DENSE_ARGS) { DENSE(64) }

/* A LayerNorm's mean and 1 / sigma of n values (summed in float64). */
ALWAYS_INLINE float layer_stats(int64_t n, const float *h, double eps, float *inv) {
    double sum = 0.0, squares = 0.0;
    for (int64_t i = 0; i < n; i++) sum += h[i];
    float mu = (float)(sum / (double)n);
    for (int64_t i = 0; i < n; i++) {
        float d = h[i] - mu;
        squares += (double)d * d;
    }
    *inv = (float)(1.0 / sqrt(squares / (double)n + eps));
    return mu;
}

/* LayerNorm (gain and bias) then ReLU, in place; the normalized values go to xhat and
 * 1 / sigma to inv, the open units' indices to alive (their count returned). */
ALWAYS_INLINE int64_t norm_relu(int64_t n, float *h, const float *gain, const float *bias,
                                double eps, int32_t *alive, float *xhat, float *inv) {
    float mu = layer_stats(n, h, eps, inv);
    int64_t open = 0;
    for (int64_t i = 0; i < n; i++) {
        xhat[i] = (h[i] - mu) * *inv;
        float y = gain[i] * xhat[i] + bias[i];
        if (y > 0.0f) alive[open++] = (int32_t)i;
        h[i] = y > 0.0f ? y : 0.0f;
    }
    return open;
}

/* The column means (over its n rows) of tangents t (n x kp), and of xhat times them. */
ALWAYS_INLINE void column_means(int64_t n, const float *t, int64_t kp, const float *xhat,
                                float *mt, float *mxt) {
    for (int64_t k = 0; k < kp; k++) mt[k] = mxt[k] = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float *row = t + i * kp;
        float x = xhat[i];
        for (int64_t k = 0; k < kp; k++) {
            mt[k] += row[k];
            mxt[k] += x * row[k];
        }
    }
    for (int64_t k = 0; k < kp; k++) {
        mt[k] /= (float)n;
        mxt[k] /= (float)n;
    }
}

/* norm_relu's tangents, on the open rows of t (n x kp) alone (the next layer reads no
 * other): d xhat = (dh - mean dh - xhat mean(xhat dh)) / sigma, scaled by the gain, from
 * the column means mt (of dh) and mxt (of xhat dh) over every unit. */
ALWAYS_INLINE void norm_tangents(float *t, int64_t kp, const float *xhat, const float *gain,
                                 float inv, const int32_t *alive, int64_t open,
                                 const float *mt, const float *mxt) {
    for (int64_t a = 0; a < open; a++) {
        int64_t i = alive[a];
        float s = gain[i] * inv, x = xhat[i], *row = t + i * kp;
        for (int64_t k = 0; k < kp; k++) row[k] = s * (row[k] - mt[k] - x * mxt[k]);
    }
}

/* tout (m x kp) = W (m x n) tin (n x kp), over tin's open rows only (the others are 0),
 * ROWS output rows at a time: their accumulators stay in registers. With rows_of, the
 * output rows are those it lists (m of them), at their own places in tout. */
#define TANGENT_ROWS(ROWS)                                                                 \
    for (int64_t i0 = 0; i0 < m; i0 += ROWS) {                                             \
        int64_t rows = m - i0 < ROWS ? m - i0 : ROWS;                                      \
        int64_t at[ROWS];                                                                  \
        for (int r = 0; r < ROWS; r++) {                                                   \
            int64_t i = i0 + (r < rows ? r : 0);                                           \
            at[r] = rows_of ? rows_of[i] : i;                                              \
        }                                                                                  \
        for (int64_t k0 = 0; k0 < kp; k0 += TANGENT_BLOCK) {                               \
            float acc[ROWS][TANGENT_BLOCK];                                                \
            for (int r = 0; r < ROWS; r++)                                                 \
                for (int k = 0; k < TANGENT_BLOCK; k++) acc[r][k] = 0.0f;                  \
            for (int64_t a = 0; a < open; a++) {                                           \
                int64_t j = alive[a];                                                      \
                const float *tj = tin + j * kp + k0;                                       \
                for (int r = 0; r < ROWS; r++) {                                           \
                    float wj = w[at[r] * n + j];                                           \
                    for (int k = 0; k < TANGENT_BLOCK; k++) acc[r][k] += wj * tj[k];       \
                }                                                                          \
            }                                                                              \
            for (int64_t r = 0; r < rows; r++)                                             \
                memcpy(tout + at[r] * kp + k0, acc[r], sizeof(float) * TANGENT_BLOCK);     \
        }                                                                                  \
    }

#define TANGENT_ARGS int64_t m, int64_t n, const float *w, const float *tin, float *tout, \
    int64_t kp, const int32_t *alive, int64_t open, const int32_t *rows_of

#if defined(__x86_64__) || defined(_M_X64) /* 16 vector registers: one row at a time */
ALWAYS_INLINE void tangents1(TANGENT_ARGS) { TANGENT_ROWS(1) }
#endif

ALWAYS_INLINE void tangents2(TANGENT_ARGS) { TANGENT_ROWS(2) }

/* Poses (n x out) and, with jac, their Jacobians (n x out x rank) of latents z (n x latent);
 * work: (hidden1 + hidden2 + out) x rank_padded floats. */
/* The layers without tangents: out (n_out) of x (n_in); h1, h2, xhat, alive1, alive2:
 * buffers. */
#define MLP_FORWARD(DENSEF, m, x, out)                                                     \
    do {                                                                                   \
        float inv_;                                                                        \
        DENSEF((m)->hidden1, (m)->n_in, (m)->w1t, (m)->b1, x, h1, NULL, 0);                \
        int64_t open1_ = norm_relu((m)->hidden1, h1, (m)->gain1, (m)->bias1, (m)->eps1,    \
                                   alive1, xhat, &inv_);                                   \
        DENSEF((m)->hidden2, (m)->hidden1, (m)->w2t, (m)->b2, h1, h2, alive1, open1_);     \
        int64_t open2_ = norm_relu((m)->hidden2, h2, (m)->gain2, (m)->bias2, (m)->eps2,    \
                                   alive2, xhat, &inv_);                                   \
        DENSEF((m)->n_out, (m)->hidden2, (m)->w3t, (m)->b3, h2, out, alive2, open2_);      \
    } while (0)

#define DECODE_BODY(TANGENTS, DENSEF)                                                      \
    float h1[DECODER_MAX_WIDTH], h2[DECODER_MAX_WIDTH], xhat[DECODER_MAX_WIDTH];           \
    float u[DECODER_MAX_WIDTH], mt[DECODER_MAX_TANGENTS], mxt[DECODER_MAX_TANGENTS];      \
    int32_t alive1[DECODER_MAX_WIDTH], alive2[DECODER_MAX_WIDTH];                          \
    const NpeMlp *m = &d->mlp;                                                             \
    int64_t kp = d->rank_padded, nd = m->n_out;                                            \
    float *t1 = work, *t2 = t1 + m->hidden1 * kp, *t3 = t2 + m->hidden2 * kp;              \
    for (int64_t f = 0; f < n; f++) {                                                      \
        float *o = pose + f * nd;                                                          \
        if (!jac) {                                                                        \
            MLP_FORWARD(DENSEF, m, z + f * m->n_in, o);                                    \
        } else {                                                                           \
            float inv;                                                                     \
            DENSEF(m->hidden1, m->n_in, m->w1t, m->b1, z + f * m->n_in, h1, NULL, 0);      \
            memcpy(t1, d->w1_basis, sizeof(float) * m->hidden1 * kp);                      \
            int64_t open1 = norm_relu(m->hidden1, h1, m->gain1, m->bias1, m->eps1, alive1, \
                                      xhat, &inv);                                         \
            column_means(m->hidden1, t1, kp, xhat, mt, mxt);                               \
            norm_tangents(t1, kp, xhat, m->gain1, inv, alive1, open1, mt, mxt);            \
            DENSEF(m->hidden2, m->hidden1, m->w2t, m->b2, h1, h2, alive1, open1);          \
            int64_t open2 = norm_relu(m->hidden2, h2, m->gain2, m->bias2, m->eps2, alive2, \
                                      xhat, &inv);                                         \
            /* The LayerNorm's tangent needs the column means of W2 t1, and of xhat W2 t1, \
             * over every unit: W2's column means (kept) and xhat W2 (here) times t1. The  \
             * rows themselves only where the ReLU stays open. */                          \
            for (int64_t b = 0; b < m->hidden1; b++) u[b] = 0.0f;                          \
            for (int64_t j = 0; j < m->hidden2; j++) {                                     \
                float xj = xhat[j] / (float)m->hidden2;                                    \
                const float *row = m->w2 + j * m->hidden1;                                 \
                for (int64_t b = 0; b < m->hidden1; b++) u[b] += row[b] * xj;              \
            }                                                                              \
            for (int64_t k = 0; k < kp; k++) mt[k] = mxt[k] = 0.0f;                        \
            for (int64_t a = 0; a < open1; a++) {                                          \
                int64_t b = alive1[a];                                                     \
                const float *row = t1 + b * kp;                                            \
                float cb = d->w2_mean[b], ub = u[b];                                       \
                for (int64_t k = 0; k < kp; k++) {                                         \
                    mt[k] += cb * row[k];                                                  \
                    mxt[k] += ub * row[k];                                                 \
                }                                                                          \
            }                                                                              \
            TANGENTS(open2, m->hidden1, m->w2, t1, t2, kp, alive1, open1, alive2);         \
            norm_tangents(t2, kp, xhat, m->gain2, inv, alive2, open2, mt, mxt);            \
            DENSEF(nd, m->hidden2, m->w3t, m->b3, h2, o, alive2, open2);                   \
            TANGENTS(nd, m->hidden2, m->w3, t2, t3, kp, alive2, open2, NULL);              \
            float *out = jac + f * nd * d->rank;                                           \
            for (int64_t i = 0; i < nd; i++)                                               \
                for (int64_t k = 0; k < d->rank; k++)                                      \
                    out[i * d->rank + k] = t3[i * kp + k] * d->scale[i];                   \
        }                                                                                  \
        for (int64_t i = 0; i < nd; i++) o[i] = o[i] * d->scale[i] + d->mean[i];           \
    }

/* The universal solver's edit as its fused graph runs it (ik_universal_fused), pose by
 * pose: the pose normalized and encoded; the solver on the latent and each joint's mask,
 * normalized target (masked) and weight (masked); the latent plus its answer decoded. Twice
 * per pose (``passes`` 2): towards the targets, then with the targets on the pose itself
 * (the unmoved edit the engine subtracts), each decoded into edited (2n x out: all the
 * first, then all the second); the first's latents into latent (n x latent). ``passes`` 1:
 * the first alone (a drag's unmoved edit is the same on every update: the caller keeps it).
 */
#define UNIVERSAL_BODY(DENSEF)                                                             \
    float h1[DECODER_MAX_WIDTH], h2[DECODER_MAX_WIDTH], x[DECODER_MAX_WIDTH];              \
    float xhat[DECODER_MAX_WIDTH];                                                         \
    float z[DECODER_MAX_WIDTH], ask[DECODER_MAX_WIDTH], edit[DECODER_MAX_WIDTH];           \
    int32_t alive1[DECODER_MAX_WIDTH], alive2[DECODER_MAX_WIDTH];                          \
    int64_t nd = d->mlp.n_out, nj = nd / 3, nl = encoder->n_out;                           \
    for (int64_t f = 0; f < n; f++) {                                                      \
        const double *p = pose + f * nd;                                                   \
        for (int64_t i = 0; i < nd; i++) x[i] = ((float)p[i] - d->mean[i]) / d->scale[i];  \
        MLP_FORWARD(DENSEF, encoder, x, z);                                                \
        for (int64_t pass = 0; pass < passes; pass++) {                                    \
            const double *t = pass == 0 ? targets + f * nd : p;                            \
            memcpy(ask, z, sizeof(float) * nl);                                            \
            for (int64_t j = 0; j < nj; j++) {                                             \
                float on = (float)mask[f * nj + j], *a = ask + nl + 5 * j;                 \
                a[0] = on;                                                                 \
                for (int c = 0; c < 3; c++)                                                \
                    a[1 + c] = (((float)t[3 * j + c] - d->mean[3 * j + c])                 \
                                / d->scale[3 * j + c]) * on;                               \
                a[4] = (float)weights[f * nj + j] * on;                                    \
            }                                                                              \
            MLP_FORWARD(DENSEF, solver, ask, edit);                                        \
            for (int64_t l = 0; l < nl; l++) edit[l] += z[l];                              \
            if (pass == 0) memcpy(latent + f * nl, edit, sizeof(float) * nl);              \
            float *o = edited + (pass * n + f) * nd;                                       \
            MLP_FORWARD(DENSEF, &d->mlp, edit, o);                                         \
            for (int64_t i = 0; i < nd; i++) o[i] = o[i] * d->scale[i] + d->mean[i];       \
        }                                                                                  \
    }

#define UNIVERSAL_ARGS const NpeMlp *encoder, const NpeMlp *solver, const NpeDecoder *d, \
    int64_t n, int64_t passes, const double *pose, const double *mask,                    \
    const double *targets, const double *weights, float *edited, float *latent

#define DECODE_ARGS const NpeDecoder *d, int64_t n, const float *z, float *pose, float *jac, \
    float *work

#if defined(__x86_64__) || defined(_M_X64)
static void decode_plain(DECODE_ARGS) { DECODE_BODY(tangents1, dense32) }
static void universal_plain(UNIVERSAL_ARGS) { UNIVERSAL_BODY(dense32) }
#else /* arm64: 32 vector registers, twice the accumulators fit */
static void decode_plain(DECODE_ARGS) { DECODE_BODY(tangents2, dense64) }
static void universal_plain(UNIVERSAL_ARGS) { UNIVERSAL_BODY(dense64) }
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
/* The same code for processors with AVX2 and FMA: found at run time, since the library is
 * built for the baseline x86-64 every such machine runs. */
__attribute__((target("avx2,fma"))) static void decode_avx2(DECODE_ARGS) {
    DECODE_BODY(tangents2, dense64)
}
__attribute__((target("avx2,fma"))) static void universal_avx2(UNIVERSAL_ARGS) {
    UNIVERSAL_BODY(dense64)
}

static int avx2_allowed = 1; /* npe_decoder_allow_avx2: the tests run both */

static int has_avx2(void) {
    static int known = -1;
    if (!avx2_allowed) return 0;
    if (known < 0) {
        unsigned int a, b, c, dx, lo, hi;
        int avx = __get_cpuid(1, &a, &b, &c, &dx) && (c & (1u << 12)) /* FMA */
                  && (c & (1u << 27)) /* OSXSAVE */ && (c & (1u << 28)) /* AVX */;
        if (avx) { /* the OS saves the AVX registers */
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            avx = (lo & 6u) == 6u && __get_cpuid_count(7, 0, &a, &b, &c, &dx)
                  && (b & (1u << 5)) /* AVX2 */;
        }
        known = avx;
    }
    return known;
}
#define DECODE(...) (has_avx2() ? decode_avx2(__VA_ARGS__) : decode_plain(__VA_ARGS__))
#define UNIVERSAL(...) \
    (has_avx2() ? universal_avx2(__VA_ARGS__) : universal_plain(__VA_ARGS__))
#else
#define DECODE(...) decode_plain(__VA_ARGS__)
#define UNIVERSAL(...) universal_plain(__VA_ARGS__)
#endif

#pragma clang fp contract(off)

static int mlp_fits(const NpeMlp *m) {
    return m->n_in <= DECODER_MAX_WIDTH && m->hidden1 <= DECODER_MAX_WIDTH
           && m->hidden2 <= DECODER_MAX_WIDTH && m->n_out <= DECODER_MAX_WIDTH;
}

static int decoder_fits(const NpeDecoder *d) {
    return mlp_fits(&d->mlp) && d->rank >= 0 && d->rank <= d->rank_padded
           && d->rank_padded <= DECODER_MAX_TANGENTS && d->rank_padded % TANGENT_BLOCK == 0;
}

/* Whether the networks run their AVX2 code here (1) or the plain one (0). */
NPE_API int64_t npe_decoder_avx2(void) {
#if defined(__x86_64__) || defined(_M_X64)
    return has_avx2();
#else
    return 0;
#endif
}

/* Allow the AVX2 code (1, the default) or not (0: the plain code, as on a processor
 * without it; for the tests). */
NPE_API void npe_decoder_allow_avx2(int64_t allow) {
#if defined(__x86_64__) || defined(_M_X64)
    avx2_allowed = allow != 0;
#else
    (void)allow;
#endif
}

/* Poses (n x out) of latents z (n x latent) and, where jac is given, their Jacobians along
 * the basis (n x out x rank). Returns 0, or -2 for a decoder wider than the kernel's
 * buffers. */
NPE_API int64_t npe_decode(DECODE_ARGS) {
    if (!decoder_fits(d)) return -2;
    DECODE(d, n, z, pose, jac, work);
    return 0;
}

/* A single pose's unmoved edit, kept by what it depends on (its pose, mask and weights):
 * a drag asks for the same one on every update. Owned by the caller (zeroed: empty). */
typedef struct {
    int64_t valid;
    double key[POSE_DIM_MAX + 2 * RIG_IK_MAX_JOINTS];
    float unmoved[POSE_DIM_MAX];
} UnmovedCache;

NPE_API int64_t npe_unmoved_cache_size(void) { return (int64_t)sizeof(UnmovedCache); }

static int64_t unmoved_key(int64_t nd, const double *pose, const double *mask,
                           const double *weights, double *key) {
    int64_t nj = nd / 3;
    memcpy(key, pose, (size_t)nd * sizeof(double));
    memcpy(key + nd, mask, (size_t)nj * sizeof(double));
    memcpy(key + nd + nj, weights, (size_t)nj * sizeof(double));
    return nd + 2 * nj;
}

/* The fused edit of n poses with ``cache`` (n = 1 only, or NULL): the unmoved pass skipped
 * where the cache holds it (the same bits), else kept there. */
static void universal_cached(const NpeMlp *encoder, const NpeMlp *solver, const NpeDecoder *d,
                             int64_t n, UnmovedCache *cache, const double *pose,
                             const double *mask, const double *targets, const double *weights,
                             float *edited, float *latent) {
    int64_t nd = d->mlp.n_out;
    double key[POSE_DIM_MAX + 2 * RIG_IK_MAX_JOINTS];
    int64_t size = 0, kept = 0;
    if (cache && n == 1) {
        size = unmoved_key(nd, pose, mask, weights, key);
        kept = cache->valid && memcmp(cache->key, key, (size_t)size * sizeof(double)) == 0;
    }
    UNIVERSAL(encoder, solver, d, n, kept ? 1 : 2, pose, mask, targets, weights, edited, latent);
    if (kept) {
        memcpy(edited + nd, cache->unmoved, (size_t)nd * sizeof(float));
    } else if (size) {
        memcpy(cache->key, key, (size_t)size * sizeof(double));
        memcpy(cache->unmoved, edited + nd, (size_t)nd * sizeof(float));
        cache->valid = 1;
    }
}

static int universal_fits(const NpeMlp *encoder, const NpeMlp *solver, const NpeDecoder *d) {
    int64_t nd = d->mlp.n_out, nl = encoder->n_out;
    return decoder_fits(d) && mlp_fits(encoder) && mlp_fits(solver) && nd % 3 == 0
           && nd <= POSE_DIM_MAX && encoder->n_in == nd && solver->n_in == nl + 5 * (nd / 3)
           && solver->n_out == nl && d->mlp.n_in == nl;
}

/* The universal solver's fused edit (UNIVERSAL_BODY) of n poses (n x out), masks and
 * weights (n x joints), targets (n x out), float64 (cast to float32 as numpy casts); a single
 * pose's unmoved edit kept in ``cache`` (or NULL). Returns 0, or -2 for networks that do not
 * fit together or the kernel's buffers. */
NPE_API int64_t npe_universal(const NpeMlp *encoder, const NpeMlp *solver, const NpeDecoder *d,
                              int64_t n, UnmovedCache *cache, const double *pose,
                              const double *mask, const double *targets,
                              const double *weights, float *edited, float *latent) {
    if (!universal_fits(encoder, solver, d)) return -2;
    universal_cached(encoder, solver, d, n, cache, pose, mask, targets, weights, edited, latent);
    return 0;
}

/* latent (n x L, float32) = z_net + v[:rank] basis, summed in float64 (refine._Point). */
static void basis_latents(int64_t n, int64_t latent, int64_t rank, int64_t nv,
                          const double *z_net, const double *basis, const double *v,
                          float *out) {
    for (int64_t f = 0; f < n; f++)
        for (int64_t l = 0; l < latent; l++) {
            double sum = 0.0;
            for (int64_t k = 0; k < rank; k++) sum += v[f * nv + k] * basis[k * latent + l];
            out[f * latent + l] = (float)(z_net[f * latent + l] + sum);
        }
}

/* raw = offset + decoded, in float64 */
static void offset_poses(int64_t count, const double *offset, const float *decoded,
                         double *raw) {
    for (int64_t i = 0; i < count; i++) raw[i] = offset[i] + (double)decoded[i];
}

/* The whole effector refinement in one call (refine._refine_native's loop): the Jacobian
 * and pose at the networks' latent, the start, then up to ``steps`` trial steps, each
 * decoded here, until no pose takes its trial. Returns 0, -1 where a bone has no direction
 * (numpy then), -2 for a decoder or body the buffers do not fit. Leaves the refined latents
 * (n x latent, float32) in latent_out and v, pose as npe_refine_accept does. */
NPE_API int64_t npe_refine_run(
    const NpeDecoder *d, float *work, int64_t n, int64_t nj, int64_t rank, int64_t steps,
    const int64_t *parents, const int64_t *rigid, const double *prior, double rigid_scale,
    double lm_start, double lm_up, const double *z_net, const double *basis,
    const double *offset, float *latent_out, float *decoded, float *jac_f, double *raw,
    double *jac_latent, const double *lengths, double *v, const double *v_net,
    double *v_try, const double *base, const double *targets, const double *weights,
    const double *follow, const double *effector_weight, const double *least_change,
    const double *spans, double *pose, double *jac, double *goal, double *row_w,
    double *rjac, double *rres, double *hess, double *inverse, double *cost,
    double *damping, double *scale, int64_t *stale) {
    int64_t nv = rank + 2, dim = 3 * nj, latent = d->mlp.n_in;
    if (!decoder_fits(d) || d->rank != rank || d->mlp.n_out != dim) return -2;
    basis_latents(n, latent, rank, nv, z_net, basis, v, latent_out);
    DECODE(d, n, latent_out, decoded, jac_f, work);
    offset_poses(n * dim, offset, decoded, raw);
    for (int64_t i = 0; i < n * dim * rank; i++) jac_latent[i] = (double)jac_f[i];
    int64_t status = npe_refine_start(n, nj, rank, parents, rigid, prior, rigid_scale,
                                      lm_start, raw, jac_latent, lengths, v, base, targets,
                                      weights, follow, effector_weight, least_change, spans,
                                      pose, jac, goal, row_w, rjac, rres, hess, inverse, cost,
                                      damping, scale);
    if (status != 0) return status;
    for (int64_t s = 0; s < steps; s++) {
        npe_refine_step(n, nj, rank, prior, v, v_net, pose, jac, goal, row_w, rjac, rres, hess,
                        inverse, damping, scale, stale, v_try);
        basis_latents(n, latent, rank, nv, z_net, basis, v_try, latent_out);
        DECODE(d, n, latent_out, decoded, NULL, work);
        offset_poses(n * dim, offset, decoded, raw);
        int64_t taken = npe_refine_accept(n, nj, rank, parents, rigid, prior, rigid_scale,
                                          lm_up, raw, lengths, v_try, v_net, goal, row_w,
                                          spans, v, pose, cost, rres, damping, stale);
        if (taken < 0) return -1;
        if (taken == 0) break;
    }
    basis_latents(n, latent, rank, nv, z_net, basis, v, latent_out);
    return 0;
}
