/* The effector refinement's start, step and accept.
 * Part of npe_native.c's single translation unit (included there, not compiled alone). */
/* ------------------------------------------------------------------ effector refinement */

/* refine.refine's Levenberg-Marquardt steps for effector requests (no metric rows, no
 * shrug, a chord Jacobian, the rigid branches' spans kept), pose by pose; the decoder runs
 * in onnxruntime between the calls. Variables: the latent's move along the basis (rank),
 * then the body's floor shift (x, z); nv = rank + 2. Per pose the caller keeps: v, v_net
 * (nv), pose (63), jac (63 x nv), goal, row_w (63), rjac (6 x nv), rres (6), inverse
 * (nv x nv: the Cholesky factor of the damped matrix), and per pose cost, damping, scale,
 * stale (the factor to redo). */

#define REFINE_MAX_VARS 96
#define POSE_DIM_MAX (3 * RIG_IK_MAX_JOINTS)

typedef struct {
    int64_t nj, rank, nv;
    const int64_t *parents;  /* (nj) parents first */
    const int64_t *rigid;  /* (2 x 6) the rigid branches' child pairs */
    const double *prior;  /* (nv) */
    double rigid_scale;  /* sqrt(RIGID_WEIGHT) */
} RefineShape;

/* refine._fixed without the Jacobian, then shifted: the bones' lengths set (directions
 * kept) and the whole pose moved along the floor by v's last two entries. -1 where a bone
 * has no direction (the caller's numpy handles those). */
static int fixed_pose(const RefineShape *r, const double *raw, const double *lengths,
                      const double *v, double *out) {
    int64_t nj = r->nj;
    memcpy(out, raw, 3 * sizeof(double));
    for (int64_t j = 1; j < nj; j++) {
        int64_t p = r->parents[j];
        double vec[3];
        for (int i = 0; i < 3; i++) vec[i] = raw[3 * j + i] - raw[3 * p + i];
        double n = sqrt(dot3(vec, vec));
        if (!(n > EPS)) return -1;
        for (int i = 0; i < 3; i++) out[3 * j + i] = out[3 * p + i] + vec[i] * (lengths[j] / n);
    }
    for (int64_t j = 0; j < nj; j++) {
        out[3 * j] += v[r->nv - 2];
        out[3 * j + 2] += v[r->nv - 1];
    }
    return 0;
}

/* The cost of a pose and variables, and its rigid residuals (refine._cost). */
static double refine_cost(const RefineShape *r, const double *pose, const double *v,
                          const double *v_net, const double *goal, const double *row_w,
                          const double *spans, double *rres) {
    double cost = 0.0, prior_cost = 0.0, rigid_cost = 0.0;
    for (int64_t k = 0; k < 3 * r->nj; k++) {
        double d = pose[k] - goal[k];
        cost += d * d * row_w[k];
    }
    for (int64_t i = 0; i < r->nv; i++) {
        double d = v[i] - v_net[i];
        prior_cost += r->prior[i] * (d * d);
    }
    for (int k = 0; k < 6; k++) {
        double gap = dist3(pose + 3 * r->rigid[k], pose + 3 * r->rigid[6 + k]);
        rres[k] = (gap - spans[k]) * r->rigid_scale;
        rigid_cost += rres[k] * rres[k];
    }
    return cost + prior_cost + rigid_cost;
}

/* The Cholesky factor L (lower, row-major) of hess + damping * scale * I, which is
 * positive definite (a Gauss-Newton matrix plus the prior and the damping): numpy inverts
 * it; a factor and two triangular solves give the same step in a sixth of the work. */
static int damped_cholesky(int64_t nv, const double *hess, double damping, double scale,
                           double *l) {
    int n = (int)nv;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j <= i; j++) {
            double sum = hess[i * n + j] + (i == j ? damping * scale : 0.0);
            for (int k = 0; k < j; k++) sum -= l[i * n + k] * l[j * n + k];
            if (i == j) {
                if (!(sum > 0.0)) return -1;
                l[i * n + i] = sqrt(sum);
            } else {
                l[i * n + j] = sum / l[j * n + j];
            }
        }
        for (int j = i + 1; j < n; j++) l[i * n + j] = 0.0;
    }
    return 0;
}

/* x = (L L^T)^-1 b */
static void cholesky_solve(int64_t nv, const double *l, const double *b, double *x) {
    int n = (int)nv;
    for (int i = 0; i < n; i++) {
        double sum = b[i];
        for (int k = 0; k < i; k++) sum -= l[i * n + k] * x[k];
        x[i] = sum / l[i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) {
        double sum = x[i];
        for (int k = i + 1; k < n; k++) sum -= l[k * n + i] * x[k];
        x[i] = sum / l[i * n + i];
    }
}

/* The refinement's start, pose by pose: the decoded pose (raw: decoder + offset) and its
 * latent Jacobian (63 x rank) made rig-shaped (refine._fixed) and shifted, the rows' goals
 * and weights, the cost, the rigid residuals and their Jacobian, the damped inverse of the
 * Gauss-Newton matrix. Returns 0, or -1 where a bone has no direction. */
static int64_t npe_refine_start(
    int64_t n, int64_t nj, int64_t rank, const int64_t *parents, const int64_t *rigid,
    const double *prior, double rigid_scale, double lm_start, const double *raw_all,
    const double *jac_latent_all, const double *lengths_all, const double *v_all,
    const double *base_all, const double *targets_all, const double *weights_all,
    const double *follow_all, const double *effector_weight_all,
    const double *least_change_all, const double *spans_all, double *pose_all,
    double *jac_all, double *goal_all, double *row_w_all, double *rjac_all, double *rres_all,
    double *hess_all, double *inverse_all, double *cost_all, double *damping_all,
    double *scale_all) {
    int64_t nv = rank + 2, dim = 3 * nj;
    if (nj > RIG_IK_MAX_JOINTS || nv > REFINE_MAX_VARS) return -2;
    RefineShape r = {nj, rank, nv, parents, rigid, prior, rigid_scale};
    for (int64_t f = 0; f < n; f++) {
        const double *raw = raw_all + f * dim, *jl = jac_latent_all + f * dim * rank;
        const double *lengths = lengths_all + f * nj, *v = v_all + f * nv;
        const double *base = base_all + f * dim, *targets = targets_all + f * dim;
        const double *weights = weights_all + f * nj, *spans = spans_all + f * 6;
        double *pose = pose_all + f * dim, *jac = jac_all + f * dim * nv;
        double *goal = goal_all + f * dim, *row_w = row_w_all + f * dim;
        double *rjac = rjac_all + f * 6 * nv, *rres = rres_all + f * 6;
        double *hess = hess_all + f * nv * nv, *inverse = inverse_all + f * nv * nv;
        if (fixed_pose(&r, raw, lengths, v, pose) != 0) return -1;
        /* d fixed / d latent: each bone's change loses its part along the bone and is
         * scaled by length / |bone|, summed down the tree (refine._fixed). */
        for (int64_t c = 0; c < rank; c++)
            for (int i = 0; i < 3; i++) jac[i * nv + c] = jl[i * rank + c];
        for (int64_t j = 1; j < nj; j++) {
            int64_t p = parents[j];
            double vec[3], unit[3];
            for (int i = 0; i < 3; i++) vec[i] = raw[3 * j + i] - raw[3 * p + i];
            double length = sqrt(dot3(vec, vec)), stretch = lengths[j] / length;
            for (int i = 0; i < 3; i++) unit[i] = vec[i] / length;
            for (int64_t c = 0; c < rank; c++) {
                double dvec[3], along = 0.0;
                for (int i = 0; i < 3; i++) {
                    dvec[i] = jl[(3 * j + i) * rank + c] - jl[(3 * p + i) * rank + c];
                    along += unit[i] * dvec[i];
                }
                for (int i = 0; i < 3; i++)
                    jac[(3 * j + i) * nv + c] = jac[(3 * p + i) * nv + c]
                                                + (dvec[i] - unit[i] * along) * stretch;
            }
        }
        for (int64_t j = 0; j < nj; j++)
            for (int i = 0; i < 3; i++) {
                jac[(3 * j + i) * nv + nv - 2] = i == 0 ? 1.0 : 0.0;
                jac[(3 * j + i) * nv + nv - 1] = i == 2 ? 1.0 : 0.0;
            }
        /* The rows: requests where asked, the least change elsewhere, towards the input
         * pose (follow 0) or the networks' own (1). */
        for (int64_t j = 0; j < nj; j++)
            for (int i = 0; i < 3; i++) {
                int64_t k = 3 * j + i;
                int asked = weights[j] > 0.0;
                row_w[k] = asked ? weights[j] * effector_weight_all[f] : least_change_all[f];
                double keep = (1.0 - follow_all[f]) * base[k] + follow_all[f] * pose[k];
                goal[k] = asked ? targets[k] : keep;
            }
        cost_all[f] = refine_cost(&r, pose, v, v, goal, row_w, spans, rres);
        /* The rigid rows' Jacobian: d|gap| = unit . (J_a - J_b). */
        for (int k = 0; k < 6; k++) {
            int64_t a = rigid[k], b = rigid[6 + k];
            double gap[3], d = dist3(pose + 3 * a, pose + 3 * b);
            double s = rigid_scale / (d > 1e-12 ? d : 1e-12);
            for (int i = 0; i < 3; i++) gap[i] = (pose[3 * a + i] - pose[3 * b + i]) * s;
            for (int64_t c = 0; c < nv; c++) {
                double sum = 0.0;
                for (int i = 0; i < 3; i++)
                    sum += gap[i] * (jac[(3 * a + i) * nv + c] - jac[(3 * b + i) * nv + c]);
                rjac[k * nv + c] = sum;
            }
        }
        /* hess = J^T W J + Jr^T Jr (row by row, the upper triangle, then mirrored); scale
         * = its mean diagonal; then the prior. */
        double trace = 0.0;
        for (int64_t a = 0; a < nv * nv; a++) hess[a] = 0.0;
        for (int64_t k = 0; k < dim + 6; k++) {
            const double *row = k < dim ? jac + k * nv : rjac + (k - dim) * nv;
            double w = k < dim ? row_w[k] : 1.0;
            for (int64_t a = 0; a < nv; a++) {
                double wa = row[a] * w;
                if (wa == 0.0) continue;
                double *out = hess + a * nv;
                for (int64_t b = a; b < nv; b++) out[b] += wa * row[b];
            }
        }
        for (int64_t a = 0; a < nv; a++)
            for (int64_t b = a + 1; b < nv; b++) hess[b * nv + a] = hess[a * nv + b];
        for (int64_t a = 0; a < nv; a++) trace += hess[a * nv + a];
        scale_all[f] = trace / (double)nv;
        for (int64_t a = 0; a < nv; a++) hess[a * nv + a] += prior[a];
        damping_all[f] = lm_start;
        if (damped_cholesky(nv, hess, damping_all[f], scale_all[f], inverse) != 0) return -1;
    }
    return 0;
}

/* One step's trial variables, pose by pose: v_try = v - (damped matrix)^-1 grad, its
 * factor redone first where stale (a failed step raised the damping). */
static int64_t npe_refine_step(
    int64_t n, int64_t nj, int64_t rank, const double *prior, const double *v_all,
    const double *v_net_all, const double *pose_all, const double *jac_all,
    const double *goal_all, const double *row_w_all, const double *rjac_all,
    const double *rres_all, const double *hess_all, double *inverse_all,
    const double *damping_all, const double *scale_all, int64_t *stale_all,
    double *v_try_all) {
    int64_t nv = rank + 2, dim = 3 * nj;
    for (int64_t f = 0; f < n; f++) {
        const double *v = v_all + f * nv, *v_net = v_net_all + f * nv, *pose = pose_all + f * dim;
        const double *jac = jac_all + f * dim * nv, *goal = goal_all + f * dim;
        const double *row_w = row_w_all + f * dim, *rjac = rjac_all + f * 6 * nv;
        const double *rres = rres_all + f * 6;
        double *inverse = inverse_all + f * nv * nv, *v_try = v_try_all + f * nv;
        if (stale_all[f]) {
            if (damped_cholesky(nv, hess_all + f * nv * nv, damping_all[f], scale_all[f],
                                inverse) != 0) return -1;
            stale_all[f] = 0;
        }
        double grad[REFINE_MAX_VARS], res[POSE_DIM_MAX];
        for (int64_t k = 0; k < dim; k++) res[k] = (pose[k] - goal[k]) * row_w[k];
        for (int64_t c = 0; c < nv; c++) {
            double sum = 0.0;
            for (int64_t k = 0; k < dim; k++) sum += res[k] * jac[k * nv + c];
            grad[c] = sum + prior[c] * (v[c] - v_net[c]);
        }
        for (int64_t c = 0; c < nv; c++) {
            double sum = 0.0;
            for (int k = 0; k < 6; k++) sum += rres[k] * rjac[k * nv + c];
            grad[c] += sum;
        }
        double step[REFINE_MAX_VARS];
        cholesky_solve(nv, inverse, grad, step);
        for (int64_t a = 0; a < nv; a++) v_try[a] = v[a] - step[a];
    }
    return 0;
}

/* The trial's decoded poses (raw: decoder + offset) judged, pose by pose: a better cost
 * takes the trial (v, pose, cost, rres); a worse one raises the damping and stales the
 * factor. Returns how many poses took their trial, or -1 where a bone has no direction. */
static int64_t npe_refine_accept(
    int64_t n, int64_t nj, int64_t rank, const int64_t *parents, const int64_t *rigid,
    const double *prior, double rigid_scale, double lm_up, const double *raw_all,
    const double *lengths_all, const double *v_try_all, const double *v_net_all,
    const double *goal_all, const double *row_w_all, const double *spans_all, double *v_all,
    double *pose_all, double *cost_all, double *rres_all, double *damping_all,
    int64_t *stale_all) {
    int64_t nv = rank + 2, dim = 3 * nj, taken = 0;
    RefineShape r = {nj, rank, nv, parents, rigid, prior, rigid_scale};
    for (int64_t f = 0; f < n; f++) {
        double pose_try[POSE_DIM_MAX], rres_try[6];
        const double *v_try = v_try_all + f * nv;
        if (fixed_pose(&r, raw_all + f * dim, lengths_all + f * nj, v_try, pose_try) != 0)
            return -1;
        double cost_try = refine_cost(&r, pose_try, v_try, v_net_all + f * nv,
                                      goal_all + f * dim, row_w_all + f * dim,
                                      spans_all + f * 6, rres_try);
        if (cost_try < cost_all[f]) {
            memcpy(v_all + f * nv, v_try, sizeof(double) * nv);
            memcpy(pose_all + f * dim, pose_try, sizeof(double) * dim);
            memcpy(rres_all + f * 6, rres_try, sizeof rres_try);
            cost_all[f] = cost_try;
            taken++;
        } else {
            damping_all[f] *= lm_up;
            stale_all[f] = 1;
        }
    }
    return taken;
}
