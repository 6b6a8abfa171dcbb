/* Neural Pose Editor's compiled kernels: the per-pose stages where numpy's per-call overhead,
 * not arithmetic, sets the time (a few hundred numpy calls on arrays of a few dozen numbers).
 *
 * Plain C99 with the C library's math only, no Python API: loaded with ctypes, so one build
 * per platform serves every Python version, and build_native.py cross-compiles every
 * platform's library from one machine (zig cc). Each function is the numpy algorithm it
 * replaces written pose by pose and bone by bone; the tests hold the two to 1e-9, and the
 * loader (native.py) falls back to numpy where the library is missing or disagrees.
 *
 * Arrays are C-contiguous float64 / int64, quaternions w, x, y, z; matrices row-major and
 * acting on column vectors (v' = R v), as in quaternions.py.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#define NPE_API __declspec(dllexport)
#else
#define NPE_API __attribute__((visibility("default")))
#endif

/* Bumped whenever a signature changes: the loader refuses a library of another version. */
#define NPE_ABI_VERSION 1
/* quaternions.EPS: vectors shorter than this have no direction (the loader checks it). */
#define EPS 1e-12

NPE_API int64_t npe_abi_version(void) { return NPE_ABI_VERSION; }
NPE_API double npe_eps(void) { return EPS; }

/* ------------------------------------------------------------------ small vector algebra */

static double dot3(const double *a, const double *b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }

static void cross3(const double *a, const double *b, double *out) {
    double x = a[1] * b[2] - a[2] * b[1], y = a[2] * b[0] - a[0] * b[2], z = a[0] * b[1] - a[1] * b[0];
    out[0] = x; out[1] = y; out[2] = z;
}

/* out = m v */
static void mat_vec(const double *m, const double *v, double *out) {
    double x = m[0] * v[0] + m[1] * v[1] + m[2] * v[2];
    double y = m[3] * v[0] + m[4] * v[1] + m[5] * v[2];
    double z = m[6] * v[0] + m[7] * v[1] + m[8] * v[2];
    out[0] = x; out[1] = y; out[2] = z;
}

/* out = m^T v */
static void mat_t_vec(const double *m, const double *v, double *out) {
    double x = m[0] * v[0] + m[3] * v[1] + m[6] * v[2];
    double y = m[1] * v[0] + m[4] * v[1] + m[7] * v[2];
    double z = m[2] * v[0] + m[5] * v[1] + m[8] * v[2];
    out[0] = x; out[1] = y; out[2] = z;
}

/* out = a b (out may not alias a or b) */
static void mat_mul(const double *a, const double *b, double *out) {
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            out[3 * i + j] = a[3 * i] * b[j] + a[3 * i + 1] * b[3 + j] + a[3 * i + 2] * b[6 + j];
}

/* out = a^T b */
static void mat_t_mul(const double *a, const double *b, double *out) {
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            out[3 * i + j] = a[i] * b[j] + a[3 + i] * b[3 + j] + a[6 + i] * b[6 + j];
}

/* ------------------------------------------------------------------ quaternions */

/* quat_to_matrix: q need not be unit (it is normalized); a zero q gives the identity. */
static void quat_to_mat(const double *q, double *m) {
    double w = q[0], x = q[1], y = q[2], z = q[3];
    double n2 = w * w + x * x + y * y + z * z;
    double s = n2 > EPS * EPS ? 2.0 / n2 : 0.0;
    double xs = x * s, ys = y * s, zs = z * s;
    double xx = x * xs, yy = y * ys, zz = z * zs, xy = x * ys, xz = x * zs, yz = y * zs;
    double wx = w * xs, wy = w * ys, wz = w * zs;
    m[0] = 1.0 - yy - zz; m[1] = xy - wz; m[2] = xz + wy;
    m[3] = xy + wz; m[4] = 1.0 - xx - zz; m[5] = yz - wx;
    m[6] = xz - wy; m[7] = yz + wx; m[8] = 1.0 - xx - yy;
}

/* quat_normalize: a zero quaternion becomes the identity. */
static void quat_unit(const double *q, double *out) {
    double n = sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
    if (n > EPS) {
        for (int i = 0; i < 4; i++) out[i] = q[i] / n;
    } else {
        out[0] = 1.0; out[1] = out[2] = out[3] = 0.0;
    }
}

/* Hamilton product a * b (b first, then a). */
static void quat_mul(const double *a, const double *b, double *out) {
    double w = a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3];
    double x = a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2];
    double y = a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1];
    double z = a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0];
    out[0] = w; out[1] = x; out[2] = y; out[3] = z;
}

/* matrix_to_quat: Shepperd's method, unit, w >= 0. */
static void mat_to_quat(const double *m, double *q) {
    double k[16] = {
        m[0] + m[4] + m[8] + 1.0, m[7] - m[5], m[2] - m[6], m[3] - m[1],
        m[7] - m[5], m[0] - m[4] - m[8] + 1.0, m[1] + m[3], m[2] + m[6],
        m[2] - m[6], m[1] + m[3], -m[0] + m[4] - m[8] + 1.0, m[5] + m[7],
        m[3] - m[1], m[2] + m[6], m[5] + m[7], -m[0] - m[4] + m[8] + 1.0,
    };
    int best = 0;
    for (int i = 1; i < 4; i++)
        if (k[5 * i] > k[5 * best]) best = i;
    quat_unit(k + 4 * best, q);
    if (q[0] < 0.0)
        for (int i = 0; i < 4; i++) q[i] = -q[i];
}

/* ------------------------------------------------------------------ fits */

/* v / |v| and whether v had a direction (a zero vector stays zero). */
static int unit3(const double *v, double *out) {
    double n = sqrt(dot3(v, v));
    int ok = n > EPS;
    for (int i = 0; i < 3; i++) out[i] = ok ? v[i] / n : 0.0;
    return ok;
}

/* quaternions.swing_quat: the smallest rotation taking direction a to direction b, w >= 0;
 * antiparallel vectors turn 180 degrees about a perpendicular axis (a crossed with its
 * smallest axis), a zero vector or parallel ones give the exact identity. */
static void swing_quat(const double *a_in, const double *b_in, double *q) {
    double a[3], b[3], u[3], axis[3];
    int a_ok = unit3(a_in, a), b_ok = unit3(b_in, b);
    double c = dot3(a, b);
    for (int i = 0; i < 3; i++) u[i] = b[i] - c * a[i];
    double ua = dot3(u, a);
    for (int i = 0; i < 3; i++) u[i] -= ua * a[i];
    double s = sqrt(dot3(u, u));
    int degenerate = s <= EPS;
    if (degenerate) {
        int small = 0;
        for (int i = 1; i < 3; i++)
            if (fabs(a[i]) < fabs(a[small])) small = i;
        double e[3] = {0.0, 0.0, 0.0}, p[3];
        e[small] = 1.0;
        cross3(a, e, p);
        unit3(p, u);
    } else {
        for (int i = 0; i < 3; i++) u[i] /= s;
    }
    if (!(a_ok && b_ok) || (degenerate && c > 0.0)) {
        q[0] = 1.0; q[1] = q[2] = q[3] = 0.0;
        return;
    }
    double half = 0.5 * atan2(s, c), sh = sin(half);
    cross3(a, u, axis);
    q[0] = cos(half);
    for (int i = 0; i < 3; i++) q[i + 1] = sh * axis[i];
}

/* The proper rotation R maximising trace(R h), h = sum a b^T (rotation_from_covariance), as
 * a unit quaternion with w >= 0: Horn's quaternion, the eigenvector of the largest
 * eigenvalue of his symmetric 4x4 matrix, by cyclic Jacobi rotations. */
static void best_turn(const double *h, double *q) {
    double sxx = h[0], sxy = h[1], sxz = h[2], syx = h[3], syy = h[4], syz = h[5];
    double szx = h[6], szy = h[7], szz = h[8];
    double a[4][4] = {
        {sxx + syy + szz, syz - szy, szx - sxz, sxy - syx},
        {syz - szy, sxx - syy - szz, sxy + syx, szx + sxz},
        {szx - sxz, sxy + syx, -sxx + syy - szz, syz + szy},
        {sxy - syx, szx + sxz, syz + szy, -sxx - syy + szz},
    };
    double v[4][4] = {{1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {0, 0, 0, 1}};
    for (int sweep = 0; sweep < 64; sweep++) {
        double off = 0.0, diag = 0.0;
        for (int i = 0; i < 4; i++) {
            diag += a[i][i] * a[i][i];
            for (int j = i + 1; j < 4; j++) off += a[i][j] * a[i][j];
        }
        if (off <= 1e-36 * diag || off == 0.0) break;
        for (int p = 0; p < 3; p++) {
            for (int r = p + 1; r < 4; r++) {
                if (a[p][r] == 0.0) continue;
                double theta = (a[r][r] - a[p][p]) / (2.0 * a[p][r]);
                double t = (theta >= 0.0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
                double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
                for (int k = 0; k < 4; k++) {  /* a <- a J (columns p, r) */
                    double akp = a[k][p], akr = a[k][r];
                    a[k][p] = c * akp - s * akr;
                    a[k][r] = s * akp + c * akr;
                }
                for (int k = 0; k < 4; k++) {  /* a <- J^T a (rows p, r) */
                    double apk = a[p][k], ark = a[r][k];
                    a[p][k] = c * apk - s * ark;
                    a[r][k] = s * apk + c * ark;
                }
                for (int k = 0; k < 4; k++) {
                    double vkp = v[k][p], vkr = v[k][r];
                    v[k][p] = c * vkp - s * vkr;
                    v[k][r] = s * vkp + c * vkr;
                }
            }
        }
    }
    int best = 0;
    for (int i = 1; i < 4; i++)
        if (a[i][i] > a[best][best]) best = i;
    double col[4] = {v[0][best], v[1][best], v[2][best], v[3][best]};
    quat_unit(col, q);
    if (q[0] < 0.0)
        for (int i = 0; i < 4; i++) q[i] = -q[i];
}

/* ------------------------------------------------------------------ forward kinematics */

/* One pose's posed frames (rig.forward_kinematics, Blender's pose evaluation): world
 * rotations r (nb, 3, 3) and heads t (nb, 3) of every bone, parents first. */
static void pose_frames(int64_t nb, const int64_t *parents, const double *rest_rot,
                        const double *rest_off, const double *q, const double *loc,
                        double *r, double *t) {
    for (int64_t b = 0; b < nb; b++) {
        double m[9], rq[9], off[3];
        const double *rr = rest_rot + 9 * b;
        quat_to_mat(q + 4 * b, rq);
        mat_mul(rr, rq, m);
        mat_vec(rr, loc + 3 * b, off);
        for (int i = 0; i < 3; i++) off[i] += rest_off[3 * b + i];
        int64_t p = parents[b];
        if (p < 0) {
            memcpy(r + 9 * b, m, sizeof m);
            memcpy(t + 3 * b, off, sizeof off);
        } else {
            double turned[3];
            mat_mul(r + 9 * p, m, r + 9 * b);
            mat_vec(r + 9 * p, off, turned);
            for (int i = 0; i < 3; i++) t[3 * b + i] = t[3 * p + i] + turned[i];
        }
    }
}

/* rig.forward_kinematics for n poses: q (n, nb, 4), loc (n, nb, 3) -> r (n, nb, 3, 3),
 * t (n, nb, 3). */
NPE_API void npe_forward_kinematics(int64_t n, int64_t nb, const int64_t *parents,
                                    const double *rest_rot, const double *rest_off,
                                    const double *q, const double *loc, double *r, double *t) {
    for (int64_t f = 0; f < n; f++)
        pose_frames(nb, parents, rest_rot, rest_off, q + f * nb * 4, loc + f * nb * 3,
                    r + f * nb * 9, t + f * nb * 3);
}

/* ------------------------------------------------------------------ positions -> rotations */

/* solver_reference.positions_to_rotations_per_bone, for n poses of one rig (bones ordered
 * parents first). Per bone: parents[b] (-1 for a root), rest_rot (3x3), rest_off (3),
 * joint_of (its canonical joint, -1 unmapped), top (1: a mapped bone without a mapped
 * ancestor, placed by location), next_start / next_bones (CSR: its next mapped descendants),
 * oriented (its index into orient's O matrices, -1 for none). Per pose: q (nb, 4), loc
 * (nb, 3), targets (21, 3), orient (O, 3, 3), already orthonormalized. Writes out_q, out_loc
 * (every bone). work: 24 * nb doubles. */
NPE_API void npe_positions_to_rotations(
    int64_t n, int64_t nb, const int64_t *parents, const double *rest_rot,
    const double *rest_off, const int64_t *joint_of, const int64_t *top,
    const int64_t *next_start, const int64_t *next_bones, const int64_t *oriented,
    int64_t n_oriented, double kabsch_prior, const double *q_in, const double *loc_in,
    const double *targets, const double *orient, double *out_q, double *out_loc, double *work) {
    double *old_r = work, *old_t = work + 9 * nb, *new_r = work + 12 * nb, *new_t = work + 21 * nb;
    for (int64_t f = 0; f < n; f++) {
        const double *q = q_in + f * nb * 4, *loc = loc_in + f * nb * 3;
        const double *tg = targets + f * 21 * 3, *orient_f = orient + f * n_oriented * 9;
        double *nq = out_q + f * nb * 4, *nloc = out_loc + f * nb * 3;
        memcpy(nq, q, sizeof(double) * 4 * nb);
        memcpy(nloc, loc, sizeof(double) * 3 * nb);
        /* The pose as it is (forward_kinematics_per_bone). */
        pose_frames(nb, parents, rest_rot, rest_off, q, loc, old_r, old_t);
        /* The new pose, parents first. */
        for (int64_t b = 0; b < nb; b++) {
            static const double eye[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
            static const double zero[3] = {0, 0, 0};
            int64_t p = parents[b];
            const double *parent_r = p < 0 ? eye : new_r + 9 * p;
            const double *parent_t = p < 0 ? zero : new_t + 3 * p;
            const double *rr = rest_rot + 9 * b;
            double off[3], head[3], a[9], qn[4], nw[4];
            mat_vec(rr, loc + 3 * b, off);
            for (int i = 0; i < 3; i++) off[i] += rest_off[3 * b + i];
            mat_vec(parent_r, off, head);
            for (int i = 0; i < 3; i++) head[i] += parent_t[i];
            mat_mul(parent_r, rr, a);
            quat_unit(q + 4 * b, qn);
            int64_t ds = next_start[b], de = next_start[b + 1];
            int changed = oriented[b] >= 0 || de > ds || top[b];
            if (!changed) {
                double rq[9];
                quat_to_mat(qn, rq);
                mat_mul(a, rq, new_r + 9 * b);
                memcpy(new_t + 3 * b, head, sizeof head);
                continue;
            }
            if (top[b]) {  /* solve base + a l = target for the location l */
                double al[3], base[3], rel[3];
                const double *target = tg + 3 * joint_of[b];
                mat_vec(a, loc + 3 * b, al);
                for (int i = 0; i < 3; i++) {
                    base[i] = head[i] - al[i];
                    rel[i] = target[i] - base[i];
                }
                mat_t_vec(a, rel, nloc + 3 * b);
                mat_vec(a, nloc + 3 * b, al);
                for (int i = 0; i < 3; i++) head[i] = base[i] + al[i];
            }
            if (oriented[b] >= 0) {
                double m[9];
                mat_t_mul(a, orient_f + 9 * oriented[b], m);
                mat_to_quat(m, nw);
                if (nw[0] * qn[0] + nw[1] * qn[1] + nw[2] * qn[2] + nw[3] * qn[3] < 0.0)
                    for (int i = 0; i < 4; i++) nw[i] = -nw[i];
            } else if (de > ds) {
                /* The vectors to the next mapped heads in the bone's posed frame as they
                 * were, turned by its local rotation; where the targets want them, in a. */
                double rq[9], change[4], h[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0}, scale = 0.0;
                double cur[3], goal[3];
                quat_to_mat(qn, rq);
                for (int64_t k = ds; k < de; k++) {
                    int64_t d = next_bones[k];
                    double v[3], rel[3], want[3];
                    for (int i = 0; i < 3; i++) v[i] = old_t[3 * d + i] - old_t[3 * b + i];
                    mat_t_vec(old_r + 9 * b, v, rel);
                    mat_vec(rq, rel, cur);
                    const double *target = tg + 3 * joint_of[d];
                    for (int i = 0; i < 3; i++) want[i] = target[i] - head[i];
                    mat_t_vec(a, want, goal);
                    for (int i = 0; i < 3; i++)
                        for (int j = 0; j < 3; j++) h[3 * i + j] += cur[i] * goal[j];
                    scale += sqrt(dot3(cur, cur)) * sqrt(dot3(goal, goal));
                }
                if (de - ds == 1) {
                    swing_quat(cur, goal, change);
                } else {
                    for (int i = 0; i < 3; i++) h[4 * i] += kabsch_prior * scale;
                    best_turn(h, change);
                }
                quat_mul(change, qn, nw);
            } else {  /* a top-level end bone: only its location changes */
                memcpy(nw, q + 4 * b, sizeof nw);
            }
            memcpy(nq + 4 * b, nw, sizeof nw);
            double rq[9];
            quat_to_mat(nw, rq);
            mat_mul(a, rq, new_r + 9 * b);
            memcpy(new_t + 3 * b, head, sizeof head);
        }
    }
}
