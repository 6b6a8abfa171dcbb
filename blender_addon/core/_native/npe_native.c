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
#define NPE_ABI_VERSION 7
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
                        const int64_t *needed, double *r, double *t) {
    for (int64_t b = 0; b < nb; b++) {
        if (needed && !needed[b]) continue;
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
        pose_frames(nb, parents, rest_rot, rest_off, q + f * nb * 4, loc + f * nb * 3, NULL,
                    r + f * nb * 9, t + f * nb * 3);
}

/* ------------------------------------------------------------------ positions -> rotations */

/* solver_reference.positions_to_rotations_per_bone, for n poses of one rig (bones ordered
 * parents first). Per bone: parents[b] (-1 for a root), rest_rot (3x3), rest_off (3),
 * joint_of (its canonical joint, -1 unmapped), top (1: a mapped bone without a mapped
 * ancestor, placed by location), next_start / next_bones (CSR: its next mapped descendants),
 * oriented (its index into orient's O matrices, -1 for none), needed (1: a mapped bone or an
 * ancestor of one; the others' frames are never read). Per pose: q (nb, 4), loc
 * (nb, 3), targets (21, 3), orient (O, 3, 3), already orthonormalized. Writes out_q, out_loc
 * (every bone). work: 24 * nb doubles. */
NPE_API void npe_positions_to_rotations(
    int64_t n, int64_t nb, const int64_t *parents, const double *rest_rot,
    const double *rest_off, const int64_t *joint_of, const int64_t *top,
    const int64_t *next_start, const int64_t *next_bones, const int64_t *oriented,
    const int64_t *needed, int64_t n_oriented, double kabsch_prior, const double *q_in, const double *loc_in,
    const double *targets, const double *orient, double *out_q, double *out_loc, double *work) {
    double *old_r = work, *old_t = work + 9 * nb, *new_r = work + 12 * nb, *new_t = work + 21 * nb;
    for (int64_t f = 0; f < n; f++) {
        const double *q = q_in + f * nb * 4, *loc = loc_in + f * nb * 3;
        const double *tg = targets + f * 21 * 3, *orient_f = orient + f * n_oriented * 9;
        double *nq = out_q + f * nb * 4, *nloc = out_loc + f * nb * 3;
        memcpy(nq, q, sizeof(double) * 4 * nb);
        memcpy(nloc, loc, sizeof(double) * 3 * nb);
        /* The pose as it is (forward_kinematics_per_bone). */
        pose_frames(nb, parents, rest_rot, rest_off, q, loc, needed, old_r, old_t);
        /* The new pose, parents first. */
        for (int64_t b = 0; b < nb; b++) {
            if (!needed[b]) continue;
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

/* ------------------------------------------------------------------ rig IK */

#define RIG_IK_MAX_JOINTS 32
#define RIG_IK_MAX_PARAMS (3 + 3 * RIG_IK_MAX_JOINTS)

/* Rodrigues: the rotation by |v| radians about v (conversions.axis_angle_to_matrix); a zero
 * v is no rotation. */
static void turn_matrix(const double *v, double *m) {
    double length = sqrt(dot3(v, v));
    double u[3] = {0.0, 0.0, 0.0}, angle = 0.0;
    if (length > EPS) {
        for (int i = 0; i < 3; i++) u[i] = v[i] / length;
        angle = length;
    }
    double c = cos(angle), s = sin(angle), k = 1.0 - c;
    m[0] = c + k * u[0] * u[0]; m[1] = -s * u[2] + k * u[0] * u[1]; m[2] = s * u[1] + k * u[0] * u[2];
    m[3] = s * u[2] + k * u[1] * u[0]; m[4] = c + k * u[1] * u[1]; m[5] = -s * u[0] + k * u[1] * u[2];
    m[6] = -s * u[1] + k * u[2] * u[0]; m[7] = s * u[0] + k * u[2] * u[1]; m[8] = c + k * u[2] * u[2];
}

/* rig_ik._apply for one pose: the pelvis moved by step[0:3], each pivot turned by its turn
 * vector about the pose's current joints, outermost first. */
static void rig_ik_apply(int64_t nj, const int64_t *parents, const int64_t *pivot_of,
                         const double *p, const double *step, double *out) {
    double turns[RIG_IK_MAX_JOINTS][9], total[RIG_IK_MAX_JOINTS][9];
    for (int64_t j = 0; j < nj; j++)
        if (pivot_of[j] >= 0) turn_matrix(step + 3 + 3 * pivot_of[j], turns[j]);
    for (int64_t j = 0; j < nj; j++) {
        int64_t parent = parents[j];
        if (parent < 0) {
            for (int i = 0; i < 3; i++) out[3 * j + i] = p[3 * j + i] + step[i];
            continue;
        }
        int64_t grand = parents[parent];
        if (grand < 0) {
            memcpy(total[j], turns[parent], sizeof total[j]);
        } else {
            mat_mul(total[parent], turns[parent], total[j]);
        }
        double bone[3], turned[3];
        for (int i = 0; i < 3; i++) bone[i] = p[3 * j + i] - p[3 * parent + i];
        mat_vec(total[j], bone, turned);
        for (int i = 0; i < 3; i++) out[3 * j + i] = out[3 * parent + i] + turned[i];
    }
}

/* Solve a x = b (n x n, row-major a, destroyed) by LU with partial pivoting, as LAPACK's
 * gesv (np.linalg.solve); b becomes x. Returns 0, or -1 for a singular matrix. */
static int lu_solve(int n, double *a, double *b) {
    for (int k = 0; k < n; k++) {
        int best = k;
        for (int i = k + 1; i < n; i++)
            if (fabs(a[i * n + k]) > fabs(a[best * n + k])) best = i;
        if (a[best * n + k] == 0.0) return -1;
        if (best != k) {
            for (int j = 0; j < n; j++) {
                double t = a[k * n + j]; a[k * n + j] = a[best * n + j]; a[best * n + j] = t;
            }
            double t = b[k]; b[k] = b[best]; b[best] = t;
        }
        for (int i = k + 1; i < n; i++) {
            double f = a[i * n + k] / a[k * n + k];
            if (f == 0.0) continue;
            for (int j = k + 1; j < n; j++) a[i * n + j] -= f * a[k * n + j];
            b[i] -= f * b[k];
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        double sum = b[i];
        for (int j = i + 1; j < n; j++) sum -= a[i * n + j] * b[j];
        b[i] = sum / a[i * n + i];
    }
    return 0;
}

/* rig_ik.solve, pose by pose (each pose's steps are its own there too). Per joint:
 * parents (-1 the pelvis; parents first), pivot_of (its index among the turning pivots, -1
 * for an end joint). Per pose: pose (nj, 3) in place, goals (nj, 0/1), targets (nj, 3),
 * tol2 (1), turning (n_pivots, 0/1: the pivots that may turn); rests (nj, 3) per pose, or
 * NULL: where the other joints are held (NULL: where they start), stay_scales (nj) or NULL:
 * each joint's hold over ``stay`` (NULL: 1). The constants are rig_ik's. */
NPE_API int64_t npe_rig_ik(
    int64_t n, int64_t nj, const int64_t *parents, const int64_t *pivot_of, int64_t n_pivots,
    double *pose, const int64_t *goals, const double *targets, const double *rests,
    const double *stay_scales, const double *tol2_all,
    const int64_t *turning_all, int64_t iterations, double stay, double stay_decay,
    double stay_floor, double floor_near, double initial_damping, double damping_down,
    double damping_up, double min_damping, double max_damping, double min_scale) {
    if (nj > RIG_IK_MAX_JOINTS || n_pivots > RIG_IK_MAX_JOINTS) return -1;
    double normal[RIG_IK_MAX_PARAMS * RIG_IK_MAX_PARAMS], rhs[RIG_IK_MAX_PARAMS];
    double aim[RIG_IK_MAX_JOINTS * 3], off2[RIG_IK_MAX_JOINTS], weight[RIG_IK_MAX_JOINTS];
    double trial[RIG_IK_MAX_JOINTS * 3], trial2[RIG_IK_MAX_JOINTS];
    int64_t chain[RIG_IK_MAX_JOINTS][RIG_IK_MAX_JOINTS], depth[RIG_IK_MAX_JOINTS];
    /* The pivots carrying each joint: its strict ancestors. */
    for (int64_t j = 0; j < nj; j++) {
        depth[j] = 0;
        for (int64_t k = parents[j]; k >= 0; k = parents[k]) chain[j][depth[j]++] = k;
    }
    for (int64_t f = 0; f < n; f++) {
        double *p = pose + f * nj * 3;
        const int64_t *goal = goals + f * nj, *turning = turning_all + f * n_pivots;
        const double *target = targets + f * nj * 3;
        const double *rest = rests ? rests + f * nj * 3 : p;
        double tol2 = tol2_all[f], damping = initial_damping;
        for (int64_t j = 0; j < nj; j++) {
            double d2 = 0.0;
            for (int i = 0; i < 3; i++) {
                aim[3 * j + i] = goal[j] ? target[3 * j + i] : rest[3 * j + i];
                double d = aim[3 * j + i] - p[3 * j + i];
                d2 += d * d;
            }
            off2[j] = d2;
        }
        /* The system's unknowns: the pelvis's move, then the turning pivots' turns (those
         * that may not turn are left out: zero, as numpy's zeroed rows and columns solve). */
        int64_t at[RIG_IK_MAX_JOINTS];
        int na = 3;
        for (int64_t a = 0; a < n_pivots; a++) {
            at[a] = turning[a] ? na : -1;
            na += turning[a] ? 3 : 0;
        }
        double stay_now = stay;  /* stay * stay_decay ** step */
        for (int64_t it = 0; it < iterations; it++, stay_now *= stay_decay) {
            double miss2 = 0.0;
            for (int64_t j = 0; j < nj; j++)
                if (goal[j] && off2[j] > miss2) miss2 = off2[j];
            if (!(miss2 > tol2 && damping < max_damping)) break;
            double floor = miss2 < floor_near * floor_near * tol2 ? stay_floor : 0.0;
            double other = stay_now > floor ? stay_now : floor;
            for (int64_t j = 0; j < nj; j++)
                weight[j] = goal[j] ? 1.0 : stay_scales ? other * stay_scales[j] : other;
            /* The normal equations J^T W J and J^T W r, block by block: a joint moves
             * with the pelvis's move (I) and with each pivot a carrying it ([p_a - p_j]x). */
            memset(normal, 0, sizeof(double) * na * na);
            memset(rhs, 0, sizeof(double) * na);
            for (int64_t j = 0; j < nj; j++) {
                double w = weight[j], r[3], back[RIG_IK_MAX_JOINTS][3];
                int64_t cols[RIG_IK_MAX_JOINTS], nc = 0;
                for (int i = 0; i < 3; i++) r[i] = aim[3 * j + i] - p[3 * j + i];
                for (int i = 0; i < 3; i++) {
                    normal[i * na + i] += w;
                    rhs[i] += w * r[i];
                }
                for (int64_t c = 0; c < depth[j]; c++) {
                    int64_t a = chain[j][c];
                    if (at[pivot_of[a]] < 0) continue;
                    cols[nc] = at[pivot_of[a]];
                    for (int i = 0; i < 3; i++) back[nc][i] = p[3 * a + i] - p[3 * j + i];
                    /* [b]x^T r = r x b; I^T [b]x = [b]x */
                    double rb[3];
                    cross3(r, back[nc], rb);
                    for (int i = 0; i < 3; i++) rhs[cols[nc] + i] += w * rb[i];
                    const double *b = back[nc];
                    double bx[9] = {0, -b[2], b[1], b[2], 0, -b[0], -b[1], b[0], 0};
                    for (int i = 0; i < 3; i++)
                        for (int k = 0; k < 3; k++) {
                            normal[i * na + cols[nc] + k] += w * bx[3 * i + k];
                            normal[(cols[nc] + k) * na + i] += w * bx[3 * i + k];
                        }
                    nc++;
                }
                /* [a]x^T [b]x = (a . b) I - b a^T */
                for (int64_t c = 0; c < nc; c++)
                    for (int64_t e = 0; e < nc; e++) {
                        const double *a = back[c], *b = back[e];
                        double ab = dot3(a, b);
                        for (int i = 0; i < 3; i++)
                            for (int k = 0; k < 3; k++)
                                normal[(cols[c] + i) * na + cols[e] + k] +=
                                    w * ((i == k ? ab : 0.0) - b[i] * a[k]);
                    }
            }
            double largest = 0.0;
            for (int i = 0; i < na; i++)
                if (normal[i * na + i] > largest) largest = normal[i * na + i];
            for (int i = 0; i < na; i++) {
                double d = normal[i * na + i], scale = d > min_scale * largest ? d : min_scale * largest;
                normal[i * na + i] = d + damping * scale;
            }
            if (lu_solve(na, normal, rhs) != 0) {
                damping *= damping_up;  /* as a step that did not help */
                continue;
            }
            /* back to every pivot's turn */
            for (int64_t a = n_pivots - 1; a >= 0; a--)
                for (int i = 2; i >= 0; i--)
                    rhs[3 + 3 * a + i] = at[a] < 0 ? 0.0 : rhs[at[a] + i];
            rig_ik_apply(nj, parents, pivot_of, p, rhs, trial);
            double now = 0.0, was = 0.0;
            for (int64_t j = 0; j < nj; j++) {
                double d2 = 0.0;
                for (int i = 0; i < 3; i++) {
                    double d = aim[3 * j + i] - trial[3 * j + i];
                    d2 += d * d;
                }
                trial2[j] = d2;
                now += weight[j] * d2;
                was += weight[j] * off2[j];
            }
            if (now < was) {
                memcpy(p, trial, sizeof(double) * nj * 3);
                memcpy(off2, trial2, sizeof(double) * nj);
                damping = damping * damping_down > min_damping ? damping * damping_down : min_damping;
            } else {
                damping *= damping_up;
            }
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ exact reach */

/* The skeleton's joints as exact_reach.py lays them out for the kernel (_NATIVE_LAYOUT):
 * the four limbs' ends, mids, starts and toes (-1: none), then single joints, then per-side
 * pairs; and masks (NUM_JOINTS each) of the joint sets a turn carries. */
enum {
    L_END = 0, L_MID = 4, L_START = 8, L_TOE = 12, L_SPINE = 16, L_CHEST, L_NECK, L_HEAD,
    L_LEG_END = 20, L_LEG_START = 22, L_LEG_MID = 24, L_CLAVICLE = 26, L_SHOULDER = 28,
    L_ELBOW = 30, L_HAND = 32, L_FOOT_TOE = 34, L_SIZE = 36
};
enum { M_TRUNK = 0, M_ABOVE_CHEST, M_ARM_LEFT, M_ARM_RIGHT, M_BODY, M_COUNT };

typedef struct {
    int64_t nj;
    const int64_t *at;  /* the layout */
    const int64_t *mask;  /* (M_COUNT, nj) */
    double slack, settle_slack, reach_margin;
    int64_t settle_passes, settle_stall;
} Reach;

static double clip(double v, double low, double high) {
    v = v > low ? v : low;
    return v < high ? v : high;
}

static double dist3(const double *a, const double *b) {
    double d[3] = {a[0] - b[0], a[1] - b[1], a[2] - b[2]};
    return sqrt(dot3(d, d));
}

/* exact_reach._bend: start s -> middle a (l1) -> end (l2) re-aimed from s towards target,
 * bending in the plane of the current bend; the new middle and end. */
static void bend(const Reach *r, const double *s, const double *a, const double *target,
                 double l1, double l2, double straightest, double *new_a, double *new_end) {
    double to_t[3], u[3], side[3], as[3];
    for (int i = 0; i < 3; i++) to_t[i] = target[i] - s[i];
    double d = sqrt(dot3(to_t, to_t)), dn = d > EPS ? d : EPS;
    for (int i = 0; i < 3; i++) u[i] = to_t[i] / dn;
    double most = 1.0 - r->slack < straightest ? 1.0 - r->slack : straightest;
    /* never straighter than asked, never shorter than the shortest reach (a zero-length
     * bone: that reach is the whole range) */
    double shortest = fabs(l1 - l2), high = (l1 + l2) * most;
    high = high > shortest ? high : shortest;
    double low = shortest + r->slack * (l1 + l2);
    d = clip(d, low < high ? low : high, high);
    for (int i = 0; i < 3; i++) as[i] = a[i] - s[i];
    double along = dot3(as, u);
    for (int i = 0; i < 3; i++) side[i] = as[i] - u[i] * along;
    double side_n = sqrt(dot3(side, side));
    if (side_n < r->slack * l1) {
        side[0] = 0.0; side[1] = u[2]; side[2] = -u[1];
        side_n = sqrt(dot3(side, side));
    }
    double sn = side_n > EPS ? side_n : EPS;
    for (int i = 0; i < 3; i++) side[i] /= sn;
    double den = 2.0 * l1 * d;
    double cos_a = clip((l1 * l1 + d * d - l2 * l2) / (den > EPS * EPS ? den : EPS * EPS),
                        -1.0, 1.0);
    double sin_a = sqrt(1.0 - cos_a * cos_a);
    for (int i = 0; i < 3; i++) {
        new_a[i] = s[i] + l1 * (cos_a * u[i] + sin_a * side[i]);
        new_end[i] = s[i] + u[i] * d;
    }
}

/* exact_reach._turn_about: the joints of a mask turned about the pivot joint by the
 * smallest rotation taking direction old to new (c I + [v]x + v v^T / (1 + c)); a zero
 * vector (a zero-length bone) has no direction and turns nothing. */
static void turn_about(const Reach *r, double *p, int64_t pivot, const int64_t *mask,
                       const double *old_in, const double *new_in) {
    double a[3], b[3], v[3], m[9], centre[3];
    double na = sqrt(dot3(old_in, old_in)), nb = sqrt(dot3(new_in, new_in));
    if (!(na > EPS) || !(nb > EPS)) return;
    for (int i = 0; i < 3; i++) { a[i] = old_in[i] / na; b[i] = new_in[i] / nb; }
    cross3(a, b, v);
    double c = dot3(a, b), k = 1.0 + c > EPS ? 1.0 + c : EPS;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) m[3 * i + j] = v[i] * (v[j] / k) + (i == j ? c : 0.0);
    m[7] += v[0]; m[2] += v[1]; m[3] += v[2];
    m[5] -= v[0]; m[6] -= v[1]; m[1] -= v[2];
    memcpy(centre, p + 3 * pivot, sizeof centre);
    for (int64_t j = 0; j < r->nj; j++) {
        if (!mask[j]) continue;
        double rel[3], turned[3];
        for (int i = 0; i < 3; i++) rel[i] = p[3 * j + i] - centre[i];
        mat_vec(m, rel, turned);
        for (int i = 0; i < 3; i++) p[3 * j + i] = centre[i] + turned[i];
    }
}

/* exact_reach._least_shift for one pose: k held points (start, goal, reach, held). */
static void least_shift(const Reach *r, int k, const double *start, const double *goal,
                        const double *reach, const int *held, double *shift) {
    double history[1024], done[3];
    int n_history = 0, going = 1;
    shift[0] = shift[1] = shift[2] = 0.0;
    for (int i = 0; i < k; i++) done[i] = 0.5 * r->settle_slack * reach[i];
    for (int64_t pass = 0; pass < r->settle_passes; pass++) {
        double worst = -INFINITY;
        for (int i = 0; i < k; i++) {
            double away[3];
            for (int c = 0; c < 3; c++) away[c] = start[3 * i + c] + shift[c] - goal[3 * i + c];
            double d = sqrt(dot3(away, away));
            double over = held[i] && going ? (d - reach[i] > 0.0 ? d - reach[i] : 0.0) : 0.0;
            double f = over / (d > EPS ? d : EPS);
            for (int c = 0; c < 3; c++) shift[c] -= away[c] * f;
            worst = worst > over - done[i] ? worst : over - done[i];
        }
        going = going && worst > 0.0;
        if (n_history >= r->settle_stall)
            going = going && worst <= 0.5 * history[n_history - r->settle_stall];
        if (!going || n_history >= 1024) break;
        history[n_history++] = worst;
    }
}

/* exact_reach._settle for one pose. */
static void settle(const Reach *r, double *p, const int64_t *goal, const double *t,
                   const double *lengths, double straightest, int head) {
    const int64_t *at = r->at;
    int k = head ? 3 : 2, held[3], any_held = 0, any_far = 0;
    double start[9], goals3[9], reach[3];
    int64_t ends[3] = {at[L_LEG_END], at[L_LEG_END + 1], at[L_HEAD]};
    int64_t froms[3] = {at[L_LEG_START], at[L_LEG_START + 1], at[L_SPINE]};
    double most = 1.0 - r->settle_slack < straightest ? 1.0 - r->settle_slack : straightest;
    for (int i = 0; i < 2; i++)
        reach[i] = (lengths[at[L_LEG_MID + i]] + lengths[at[L_LEG_END + i]]) * most;
    reach[2] = (lengths[at[L_CHEST]] + lengths[at[L_NECK]] + lengths[at[L_HEAD]]) * most;
    for (int i = 0; i < k; i++) {
        held[i] = goal[ends[i]] != 0;
        any_held |= held[i];
        memcpy(start + 3 * i, p + 3 * froms[i], 3 * sizeof(double));
        memcpy(goals3 + 3 * i, t + 3 * ends[i], 3 * sizeof(double));
        if (held[i] && dist3(start + 3 * i, goals3 + 3 * i) > reach[i]) any_far = 1;
    }
    if (!any_held || !any_far) return;
    const int64_t *body = r->mask + M_BODY * r->nj;
    for (int64_t j = 0; j < r->nj; j++)
        if (body[j] && goal[j]) return;
    double shift[3];
    least_shift(r, k, start, goals3, reach, held, shift);
    if (head) {
        int off = 0;
        for (int i = 0; i < 2; i++) {
            double moved[3];
            for (int c = 0; c < 3; c++) moved[c] = start[3 * i + c] + shift[c];
            if (held[i] && dist3(moved, goals3 + 3 * i) > reach[i] * (1.0 + r->settle_slack)) off = 1;
        }
        if (off) least_shift(r, 2, start, goals3, reach, held, shift);
    }
    if (fabs(shift[0]) > 0.0 || fabs(shift[1]) > 0.0 || fabs(shift[2]) > 0.0)
        for (int64_t j = 0; j < r->nj; j++)
            for (int c = 0; c < 3; c++) p[3 * j + c] += shift[c];
}

/* exact_reach._bend_spine_to_head for one pose; 1 where it bent the trunk. */
static int bend_spine_to_head(const Reach *r, double *p, const int64_t *goal, const double *t,
                              const double *lengths) {
    const int64_t *at = r->at;
    int64_t spine = at[L_SPINE], chest = at[L_CHEST], head = at[L_HEAD];
    if (!goal[head]) return 0;
    const double *target = t + 3 * head;
    if (!(dist3(target, p + 3 * chest) > lengths[at[L_NECK]] + lengths[head] - r->reach_margin))
        return 0;
    double s[3], c[3], h[3], new_chest[3], new_head[3], old_dir[3], new_dir[3];
    memcpy(s, p + 3 * spine, sizeof s);
    memcpy(c, p + 3 * chest, sizeof c);
    memcpy(h, p + 3 * head, sizeof h);
    bend(r, s, c, target, dist3(c, s), dist3(h, c), 1.0, new_chest, new_head);
    for (int i = 0; i < 3; i++) { old_dir[i] = c[i] - s[i]; new_dir[i] = new_chest[i] - s[i]; }
    turn_about(r, p, spine, r->mask + M_TRUNK * r->nj, old_dir, new_dir);
    for (int i = 0; i < 3; i++) {
        old_dir[i] = p[3 * head + i] - p[3 * chest + i];
        new_dir[i] = target[i] - p[3 * chest + i];
    }
    turn_about(r, p, chest, r->mask + M_ABOVE_CHEST * r->nj, old_dir, new_dir);
    return 1;
}

/* exact_reach._shrug_to_hands for one pose. */
static void shrug_to_hands(const Reach *r, double *p, const int64_t *goal, const double *t,
                           const double *lengths, double straightest) {
    const int64_t *at = r->at;
    double most = 1.0 - r->settle_slack < straightest ? 1.0 - r->settle_slack : straightest;
    for (int k = 0; k < 2; k++) {
        int64_t clav = at[L_CLAVICLE + k], shoulder = at[L_SHOULDER + k];
        int64_t elbow = at[L_ELBOW + k], hand = at[L_HAND + k];
        if (!goal[hand] || goal[clav] || goal[shoulder] || goal[elbow]) continue;
        double reach = (lengths[elbow] + lengths[hand]) * most;
        const double *g = t + 3 * hand, *pivot = p + 3 * clav, *sh = p + 3 * shoulder;
        if (!(dist3(g, sh) > reach)) continue;
        double radius = dist3(sh, pivot), to_goal[3], u_goal[3], u_now[3], side[3], u_new[3];
        radius = radius > EPS ? radius : EPS;
        for (int i = 0; i < 3; i++) to_goal[i] = g[i] - pivot[i];
        double dist = sqrt(dot3(to_goal, to_goal));
        dist = dist > EPS ? dist : EPS;
        for (int i = 0; i < 3; i++) {
            u_goal[i] = to_goal[i] / dist;
            u_now[i] = (sh[i] - pivot[i]) / radius;
        }
        double cos_phi = clip((radius * radius + dist * dist - reach * reach) /
                              (2.0 * radius * dist), -1.0, 1.0);
        double along = dot3(u_now, u_goal);
        for (int i = 0; i < 3; i++) side[i] = u_now[i] - u_goal[i] * along;
        double sn = sqrt(dot3(side, side));
        sn = sn > EPS ? sn : EPS;
        double sin_phi = sqrt(1.0 - cos_phi * cos_phi);
        for (int i = 0; i < 3; i++) u_new[i] = cos_phi * u_goal[i] + sin_phi * side[i] / sn;
        turn_about(r, p, clav, r->mask + (M_ARM_LEFT + k) * r->nj, u_now, u_new);
    }
}

static void goal_errors(int64_t nj, const double *p, const int64_t *goal, const double *t,
                        double *err) {
    for (int64_t j = 0; j < nj; j++) err[j] = goal[j] ? dist3(p + 3 * j, t + 3 * j) : 0.0;
}

/* exact_reach.solve, pose by pose: pose (n, nj, 3) in place; goals (n, nj); targets
 * (n, nj, 3); lengths (n, nj); tol (n); straight (n, nj): each goal's straightest share;
 * settle_straightest, shrug_straightest: the settling's and the shrug's; bend_trunk. */
NPE_API int64_t npe_exact_reach(
    int64_t n, int64_t nj, const int64_t *layout, const int64_t *masks, double *pose,
    const int64_t *goals, const double *targets, const double *lengths_all,
    const double *tol_all, const double *straight_all, double settle_straightest,
    double shrug_straightest, int64_t bend_trunk, double slack, double settle_slack,
    double reach_margin, int64_t settle_passes, int64_t settle_stall) {
    if (nj > RIG_IK_MAX_JOINTS) return -1;
    Reach r = {nj, layout, masks, slack, settle_slack, reach_margin, settle_passes, settle_stall};
    const int64_t *at = layout;
    double err[RIG_IK_MAX_JOINTS];
    for (int64_t f = 0; f < n; f++) {
        double *p = pose + f * nj * 3;
        const int64_t *goal = goals + f * nj;
        const double *t = targets + f * nj * 3, *lengths = lengths_all + f * nj;
        const double *straight = straight_all + f * nj;
        double tol = tol_all[f], worst = 0.0;
        goal_errors(nj, p, goal, t, err);
        for (int64_t j = 0; j < nj; j++) worst = err[j] > worst ? err[j] : worst;
        if (!(worst > tol)) continue;
        settle(&r, p, goal, t, lengths, settle_straightest, (int)bend_trunk);
        if (bend_trunk && bend_spine_to_head(&r, p, goal, t, lengths))
            goal_errors(nj, p, goal, t, err);
        int64_t head = at[L_HEAD], chest = at[L_CHEST], neck = at[L_NECK];
        if (goal[head] && err[head] > tol) {
            double c[3], nk[3], new_neck[3], new_head[3], old_dir[3], new_dir[3];
            memcpy(c, p + 3 * chest, sizeof c);
            memcpy(nk, p + 3 * neck, sizeof nk);
            bend(&r, c, nk, t + 3 * head, lengths[neck], lengths[head], straight[head],
                 new_neck, new_head);
            for (int i = 0; i < 3; i++) { old_dir[i] = nk[i] - c[i]; new_dir[i] = new_neck[i] - c[i]; }
            turn_about(&r, p, chest, masks + M_ABOVE_CHEST * nj, old_dir, new_dir);
            memcpy(p + 3 * neck, new_neck, sizeof new_neck);
            memcpy(p + 3 * head, new_head, sizeof new_head);
            goal_errors(nj, p, goal, t, err);
        }
        if (bend_trunk) shrug_to_hands(&r, p, goal, t, lengths, shrug_straightest);
        for (int k = 0; k < 4; k++) {
            int64_t end = at[L_END + k], mid = at[L_MID + k], start = at[L_START + k];
            int64_t toe = at[L_TOE + k];
            if (!(goal[end] && err[end] > tol)) continue;
            double g[3], new_a[3], new_g[3], s[3], a[3];
            memcpy(g, p + 3 * end, sizeof g);
            memcpy(s, p + 3 * start, sizeof s);
            memcpy(a, p + 3 * mid, sizeof a);
            bend(&r, s, a, t + 3 * end, lengths[mid], lengths[end], straight[end], new_a, new_g);
            memcpy(p + 3 * mid, new_a, sizeof new_a);
            memcpy(p + 3 * end, new_g, sizeof new_g);
            if (toe >= 0)
                for (int i = 0; i < 3; i++) p[3 * toe + i] += new_g[i] - g[i];
        }
        for (int k = 0; k < 2; k++) {
            int64_t ankle = at[L_LEG_END + k], toe = at[L_FOOT_TOE + k];
            if (!goal[toe]) continue;
            double aim[3];
            for (int i = 0; i < 3; i++) aim[i] = t[3 * toe + i] - p[3 * ankle + i];
            double na = sqrt(dot3(aim, aim));
            double f = lengths[toe] / (na > EPS ? na : EPS);
            for (int i = 0; i < 3; i++) p[3 * toe + i] = p[3 * ankle + i] + aim[i] * f;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ rigid branches */

/* rigid_branches._place: branch children to their places, each child's bone to the next
 * joint swung to aim where that joint was (length kept), what hangs below it moved along.
 * carry (nj, k): joint j hangs at or below next[k]. */
static void place_children(int64_t nj, double *p, int k, const int64_t *children,
                           const double *placed, const int64_t *nexts, const int64_t *carry) {
    double delta[3][3];
    for (int c = 0; c < k; c++) {
        const double *below = p + 3 * nexts[c], *child = p + 3 * children[c];
        double bone[3], toward[3];
        for (int i = 0; i < 3; i++) {
            bone[i] = below[i] - child[i];
            toward[i] = below[i] - placed[3 * c + i];
        }
        double t2 = dot3(toward, toward);
        double scale = sqrt(dot3(bone, bone) / (t2 > 1e-24 ? t2 : 1e-24));
        for (int i = 0; i < 3; i++) delta[c][i] = placed[3 * c + i] + toward[i] * scale - below[i];
    }
    for (int c = 0; c < k; c++) memcpy(p + 3 * children[c], placed + 3 * c, 3 * sizeof(double));
    for (int64_t j = 0; j < nj; j++)
        for (int c = 0; c < k; c++)
            if (carry[j * k + c])
                for (int i = 0; i < 3; i++) p[3 * j + i] += delta[c][i];
}

/* The best rotation (Kabsch) of sum_k w_k a_k b_k^T as a matrix. */
static void fit_rotation(const double *h, double *m) {
    double q[4];
    best_turn(h, q);
    quat_to_mat(q, m);
}

/* rigid_branches.keep_rigid, pose by pose: pose (n, nj, 3) in place, start (n, nj, 3),
 * held_pelvis (n). layout: the pelvis's 4 fit points (the pelvis first), its 3 children's
 * next joints, the chest, its 3 children, their 3 next joints; pelvis_weights (4);
 * carry_pelvis, carry_chest (nj, 3). */
NPE_API void npe_keep_rigid(int64_t n, int64_t nj, const int64_t *layout,
                            const double *pelvis_weights, double held_pelvis_weight,
                            const int64_t *carry_pelvis, const int64_t *carry_chest,
                            double *pose, const double *start_all, const int64_t *held_pelvis) {
    const int64_t *points = layout, *pelvis_next = layout + 4, chest = layout[7];
    const int64_t *chest_children = layout + 8, *chest_next = layout + 11;
    for (int64_t f = 0; f < n; f++) {
        double *p = pose + f * nj * 3;
        const double *start = start_all + f * nj * 3;
        double w[4], total = 0.0, was_c[3] = {0, 0, 0}, now_c[3] = {0, 0, 0};
        double was[4][3], h[9] = {0}, hc[9] = {0}, r[9], rc[9], chest_was[3][3];
        for (int k = 0; k < 4; k++) {
            w[k] = k == 0 && held_pelvis[f] ? held_pelvis_weight : pelvis_weights[k];
            total += w[k];
        }
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 3; i++) {
                was_c[i] += w[k] / total * start[3 * points[k] + i];
                now_c[i] += w[k] / total * p[3 * points[k] + i];
            }
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 3; i++) was[k][i] = start[3 * points[k] + i] - was_c[i];
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++)
                    h[3 * i + j] += w[k] * was[k][i] * (p[3 * points[k] + j] - now_c[j]);
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < 3; i++)
                chest_was[k][i] = start[3 * chest_children[k] + i] - start[3 * chest + i];
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++)
                    hc[3 * i + j] += chest_was[k][i] *
                                     (p[3 * chest_children[k] + j] - p[3 * chest + j]);
        }
        fit_rotation(h, r);
        fit_rotation(hc, rc);
        double placed[4][3];
        for (int k = 0; k < 4; k++) {
            mat_vec(r, was[k], placed[k]);
            for (int i = 0; i < 3; i++) placed[k][i] += now_c[i];
        }
        memcpy(p + 3 * points[0], placed[0], 3 * sizeof(double));
        place_children(nj, p, 3, points + 1, &placed[1][0], pelvis_next, carry_pelvis);
        double chest_placed[3][3];
        for (int k = 0; k < 3; k++) {
            mat_vec(rc, chest_was[k], chest_placed[k]);
            for (int i = 0; i < 3; i++) chest_placed[k][i] += p[3 * chest + i];
        }
        place_children(nj, p, 3, chest_children, &chest_placed[0][0], chest_next, carry_chest);
    }
}

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
NPE_API int64_t npe_refine_start(
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
NPE_API int64_t npe_refine_step(
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
NPE_API int64_t npe_refine_accept(
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

/* ------------------------------------------------------------------ the solve's end */

/* normalize.set_bone_lengths: each bone with its length in ``lengths``, its direction kept
 * (a bone without one takes its parent's, +Y off the pelvis), the pelvis at ``root``. */
static void with_lengths(int64_t nj, const int64_t *parents, const double *p,
                         const double *lengths, const double *root, double *out) {
    double dirs[3 * RIG_IK_MAX_JOINTS];
    dirs[0] = 0.0; dirs[1] = 1.0; dirs[2] = 0.0;
    memcpy(out, root, 3 * sizeof(double));
    for (int64_t j = 1; j < nj; j++) {
        int64_t q = parents[j];
        double vec[3];
        for (int i = 0; i < 3; i++) vec[i] = p[3 * j + i] - p[3 * q + i];
        double n = sqrt(dot3(vec, vec));
        for (int i = 0; i < 3; i++) {
            dirs[3 * j + i] = n > EPS ? vec[i] / n : dirs[3 * q + i];
            out[3 * j + i] = out[3 * q + i] + lengths[j] * dirs[3 * j + i];
        }
    }
}


/* What npe_finish reads besides the poses: the skeleton, keep_rigid's and exact_reach's
 * tables as their own kernels take them, and the pipeline's re-aim constants. */
typedef struct {
    int64_t nj;
    const int64_t *parents;  /* (nj) parents first */
    const int64_t *rigid_layout;  /* npe_keep_rigid's layout */
    const double *pelvis_weights;
    double held_pelvis_weight;
    const int64_t *carry_pelvis, *carry_chest;
    const int64_t *reach_layout, *reach_masks;  /* npe_exact_reach's */
    double slack, settle_slack, reach_margin;
    int64_t settle_passes, settle_stall;
    const double *network_straightest;  /* (nj) a moved goal's straightest share */
    const int64_t *hand_goals;  /* (nj) 1 on the hands */
    double arm_straightest;
    double moved_m, moved_per_tolerance;  /* MOVED_M, MOVED_M / REACH_TOLERANCE */
    const int64_t *reach_pairs, *reach_segments;  /* npe_beyond_reach's tables */
    int64_t n_reach_pairs, reach_width;
    double miss_note;  /* pipeline.MISS_NOTE_M: the notes look at no pose missing by less */
    /* The least-change stage (pipeline._reach_rest): rig IK's tables and constants. */
    const int64_t *pivot_of;  /* (nj) rig_ik._PIVOT_OF */
    const int64_t *pivots;  /* (n_pivots) rig_ik._PIVOTS */
    const int64_t *carried;  /* (n_pivots x nj) rig_ik._CARRIED */
    const int64_t *hand_arm;  /* (nj x nj) pipeline._HAND_ARM_BONES */
    const int64_t *moved_limbs;  /* (nj x nj) pipeline._MOVED_LIMBS */
    const int64_t *stance;  /* (nj) pipeline._STANCE */
    const double *hold;  /* (nj) pipeline._LEAST_CHANGE_HOLD */
    int64_t n_pivots, steps;  /* pipeline.LEAST_CHANGE_STEPS */
    double stay, stay_decay;  /* rig_ik.STAY_WEIGHT, pipeline.LEAST_CHANGE_STAY_DECAY */
    double stay_floor, floor_near, initial_damping, damping_down,
        damping_up, min_damping, max_damping, min_scale;
    double miss_per_tolerance;  /* MISS_NOTE_M / REACH_TOLERANCE */
    int64_t pull_passes;  /* reach_bounds.PULL_PASSES */
} FinishShape;

NPE_API void npe_beyond_reach(int64_t nj, int64_t s, int64_t width, const int64_t *pairs,
                              const int64_t *segments, const double *pose,
                              const int64_t *goals, const double *targets, double *over,
                              int64_t *other);

/* normalize.from_model_space_unchecked (fix_lengths): the model pose's bones with the rig's
 * lengths (directions kept; a bone without one takes its parent's, +Y off the pelvis), the
 * pelvis height in rig units, turned back and put over the frame's root; then ``move``. */
static void from_model(const FinishShape *s, const double *m, const double *lengths,
                       double scale, const double *turn, const double *root,
                       const double *move, double *out) {
    int64_t nj = s->nj;
    const double origin[3] = {0.0, 0.0, 0.0};
    double rel[3 * RIG_IK_MAX_JOINTS];
    with_lengths(nj, s->parents, m, lengths, origin, rel);
    for (int64_t j = 0; j < nj; j++) {
        double v[3];
        for (int i = 0; i < 3; i++) v[i] = rel[3 * j + i] + m[i] / scale;
        mat_vec(turn, v, out + 3 * j);
        for (int i = 0; i < 3; i++) out[3 * j + i] = out[3 * j + i] + root[i] + move[i];
    }
}

static void reach_once(const FinishShape *s, double *pose, const int64_t *goals,
                       const double *targets, const double *lengths, double tol,
                       const double *straight, double settle, double shrug, int64_t bend_trunk) {
    npe_exact_reach(1, s->nj, s->reach_layout, s->reach_masks, pose, goals, targets, lengths,
                    &tol, straight, settle, shrug, bend_trunk, s->slack, s->settle_slack,
                    s->reach_margin, s->settle_passes, s->settle_stall);
}

static double largest_error(int64_t nj, const double *p, const int64_t *goals, const double *t,
                            double *err) {
    double worst = 0.0;
    goal_errors(nj, p, goals, t, err);
    for (int64_t j = 0; j < nj; j++) worst = err[j] > worst ? err[j] : worst;
    return worst;
}

/* pipeline._reaim_both: the pose in ``bent`` re-aimed with each hand goal's elbow bent
 * (left there), then the answer into ``out``. */
static void reaim_both(const FinishShape *s, double *bent, double *out, const int64_t *goals,
                       const double *t, const double *lengths, double tol) {
    int64_t nj = s->nj, hands = 0;
    double straight[RIG_IK_MAX_JOINTS];
    for (int64_t j = 0; j < nj; j++) {
        straight[j] = goals[j] && s->hand_goals[j] ? s->arm_straightest : 1.0;
        hands |= goals[j] && s->hand_goals[j];
    }
    reach_once(s, bent, goals, t, lengths, tol, straight, 1.0, s->arm_straightest, 1);
    memcpy(out, bent, 3 * (size_t)nj * sizeof(double));
    if (hands) {
        for (int64_t j = 0; j < nj; j++) straight[j] = 1.0;
        reach_once(s, out, goals, t, lengths, tol, straight, 1.0, 1.0, 1);
    }
}

/* The largest of |a - b| along the three axes (pipeline._moved's measure of a target off
 * its joint). */
static double axis_gap(const double *a, const double *b) {
    double off = 0.0;
    for (int i = 0; i < 3; i++) {
        double gap = fabs(a[i] - b[i]);
        off = gap > off ? gap : off;
    }
    return off;
}

/* pipeline._moved of the goals (rig units): a target off its joint's start by over
 * ``moved_tol`` along an axis. */
static void moved_goals(int64_t nj, const int64_t *goals, const double *t, const double *start,
                        double moved_tol, int64_t *moved) {
    for (int64_t j = 0; j < nj; j++)
        moved[j] = goals[j] && axis_gap(t + 3 * j, start + 3 * j) > moved_tol;
}

/* pipeline._reach_rest's least change for one pose whose re-aims (npe_finish's: ``bent``,
 * the elbows bent, and ``out``, the answer) leave a goal short, or a dragged hand reached
 * only with its elbow straightened: rig IK from the bent re-aim (a dragged hand's elbow
 * kept) towards the targets, those beyond the rig's reach pulled back onto its bound
 * (reach_bounds.pulled_within), the other joints held where the steps start but the
 * stance, held harder at ``start`` (where a moved goal's limb is not), re-aimed again, taken
 * into ``out`` as _reach_rest takes it (``fallback``: not a drag update). Returns 1 where the pose still needs _reach_rest's
 * FABRIK stage (with ``fallback`` only), else 0. */
static int64_t least_change(const FinishShape *s, const double *start, const int64_t *goals,
                            const double *t, const double *lengths, double tol,
                            const double *bent, double *out, int64_t fallback) {
    int64_t nj = s->nj, moved[RIG_IK_MAX_JOINTS], other[RIG_IK_MAX_JOINTS];
    int64_t frozen[RIG_IK_MAX_JOINTS], turning[RIG_IK_MAX_JOINTS];
    double reaim_err[RIG_IK_MAX_JOINTS], err[RIG_IK_MAX_JOINTS], over[RIG_IK_MAX_JOINTS];
    double aims[3 * RIG_IK_MAX_JOINTS], polished[3 * RIG_IK_MAX_JOINTS];
    double answer[3 * RIG_IK_MAX_JOINTS], rest[3 * RIG_IK_MAX_JOINTS];
    if (s->n_pivots > RIG_IK_MAX_JOINTS) return fallback;
    double reaim_miss = largest_error(nj, out, goals, t, reaim_err);
    double near = tol * s->miss_per_tolerance;
    moved_goals(nj, goals, t, start, tol * s->moved_per_tolerance, moved);
    int64_t straightened = 0;
    if (reaim_miss <= tol) {
        goal_errors(nj, bent, goals, t, err);
        for (int64_t j = 0; j < nj; j++)
            straightened |= moved[j] && s->hand_goals[j] && err[j] > tol;
    }
    if (!(reaim_miss > tol || straightened)) return 0;
    npe_beyond_reach(nj, s->n_reach_pairs, s->reach_width, s->reach_pairs, s->reach_segments,
                     start, goals, t, over, other);
    double most = 0.0;
    for (int64_t j = 0; j < nj; j++) most = over[j] > most ? over[j] : most;
    int64_t beyond = most > near;
    memcpy(aims, t, 3 * (size_t)nj * sizeof(double));
    for (int64_t k = 0; beyond && k < s->pull_passes; k++) {  /* pulled_within */
        if (k > 0)
            npe_beyond_reach(nj, s->n_reach_pairs, s->reach_width, s->reach_pairs,
                             s->reach_segments, start, goals, aims, over, other);
        int64_t worst = 0;
        for (int64_t j = 1; j < nj; j++) worst = over[j] > over[worst] ? j : worst;
        double excess = over[worst];
        if (!(excess > 0.0)) break;
        double anchor[3], away[3];
        for (int i = 0; i < 3; i++) {
            anchor[i] = aims[3 * other[worst] + i];
            away[i] = aims[3 * worst + i] - anchor[i];
        }
        double apart = sqrt(dot3(away, away)), room = apart - excess - tol;
        double keep = (room > 0.0 ? room : 0.0) / (apart > 1e-12 ? apart : 1e-12);
        for (int i = 0; i < 3; i++) aims[3 * worst + i] = anchor[i] + away[i] * keep;
    }
    /* rig IK from the bent re-aim, a dragged hand's arm keeping its bend */
    for (int64_t j = 0; j < nj; j++) frozen[j] = 0;
    for (int64_t h = 0; h < nj; h++)
        if (moved[h] && s->hand_goals[h])
            for (int64_t j = 0; j < nj; j++) frozen[j] |= s->hand_arm[h * nj + j] != 0;
    for (int64_t a = 0; a < s->n_pivots; a++) {
        int64_t carries = 0;
        for (int64_t j = 0; j < nj; j++) carries |= goals[j] && s->carried[a * nj + j];
        turning[a] = carries && !frozen[s->pivots[a]];
    }
    memcpy(polished, bent, 3 * (size_t)nj * sizeof(double));
    for (int64_t j = 0; j < nj; j++) {  /* the stance held at the start, but a moved limb */
        int64_t limb = 0;
        for (int64_t h = 0; h < nj; h++) limb |= moved[h] && s->moved_limbs[h * nj + j];
        memcpy(rest + 3 * j, (s->stance[j] && !limb ? start : bent) + 3 * j,
               3 * sizeof(double));
    }
    double tol2 = tol * tol;
    if (npe_rig_ik(1, nj, s->parents, s->pivot_of, s->n_pivots, polished, goals, aims, rest,
                   s->hold, &tol2, turning, s->steps, s->stay, s->stay_decay,
                   s->stay_floor, s->floor_near, s->initial_damping, s->damping_down,
                   s->damping_up, s->min_damping, s->max_damping, s->min_scale) != 0)
        return fallback;
    reaim_both(s, polished, answer, goals, t, lengths, tol);
    double miss = largest_error(nj, answer, goals, t, err);
    double held_worst = 0.0, moved_now = 0.0, moved_was = 0.0;
    for (int64_t j = 0; j < nj; j++) {
        if (goals[j] && !moved[j]) held_worst = err[j] > held_worst ? err[j] : held_worst;
        if (moved[j]) {
            moved_now = err[j] > moved_now ? err[j] : moved_now;
            moved_was = reaim_err[j] > moved_was ? reaim_err[j] : moved_was;
        }
    }
    int64_t taken = beyond ? held_worst <= tol && moved_now < moved_was
                    : fallback ? miss <= near : miss < reaim_miss || miss <= near;
    if (taken) memcpy(out, answer, 3 * (size_t)nj * sizeof(double));
    return fallback && miss > near && !straightened && !beyond;
}

/* One pose's misses of its user's effectors (off user_mask: 0), and with ``over`` (else
 * NULL) the notes' reach bound: reach_bounds.beyond_reach of the start pose towards the
 * full-weight goals where an effector misses by over miss_note (0 and -1 elsewhere). */
static void finish_errors(const FinishShape *s, const double *out, const double *start,
                          const double *t, const double *mask, const double *w,
                          const double *user_mask, double *errors, double *over,
                          int64_t *other) {
    int64_t nj = s->nj, missed = 0;
    for (int64_t j = 0; j < nj; j++) {
        double d[3];
        for (int i = 0; i < 3; i++) d[i] = out[3 * j + i] - t[3 * j + i];
        double e = user_mask[j] > 0.0 ? sqrt(dot3(d, d)) : 0.0;
        errors[j] = e;
        missed |= e > s->miss_note;
    }
    if (!over) return;
    int64_t held[RIG_IK_MAX_JOINTS];
    for (int64_t j = 0; j < nj; j++) held[j] = mask[j] > 0.0 && w[j] >= 1.0;
    if (missed)
        npe_beyond_reach(nj, s->n_reach_pairs, s->reach_width, s->reach_pairs,
                         s->reach_segments, start, held, t, over, other);
    else
        for (int64_t j = 0; j < nj; j++) {
            over[j] = 0.0;
            other[j] = -1;
        }
}

/* PoseEditor._solve's end, pose by pose, from the model-space answer ``pose_model``: back to
 * the rig and its bone lengths, moved by the floor shift (n x 2, model units) where
 * ``moves``, the pelvis and chest made rigid
 * (``rigid``), then
 * - refined = 0, the networks' answer: each moved limb re-aimed at that answer (the model
 *   offset back in rig units), kept bent, and the full-weight pins and planted feet at
 *   their targets (exact_reach.solve as _solve calls it); left[f] = 0;
 * - refined = 1: pipeline._reach_exactly's re-aims (the hands' elbows bent first, in
 *   ``bent``, then the answer) and whether the pose needs its rig IK stage (left[f] = 1).
 * ``out`` holds the answer and ``errors`` its effectors' misses (off user_mask: 0); with
 * over_all and other_all (else NULL), reach_bounds.beyond_reach of the start pose towards the
 * full-weight goals where an effector misses by over miss_note (0 and -1 elsewhere). */
NPE_API int64_t npe_finish(
    const FinishShape *s, int64_t n, int64_t refined, const double *pose_model,
    const double *model, const double *start_all, const double *root_all,
    const double *lengths_all, const double *scale_all, const double *turn_all,
    const double *offset_scales_all, const double *shift_all, int64_t moves,
    const double *targets_all,
    const double *mask_all, const double *weights_all, const double *user_mask_all,
    const double *tol_all, double *rigid_all, double *bent_all, double *out_all,
    double *errors_all, int64_t *left, double *over_all, int64_t *other_all) {
    int64_t nj = s->nj;
    if (nj > RIG_IK_MAX_JOINTS) return -1;
    for (int64_t f = 0; f < n; f++) {
        size_t at = (size_t)(f * nj * 3);
        const double *m = pose_model + at, *start = start_all + at, *t = targets_all + at;
        const double *lengths = lengths_all + f * nj, *mask = mask_all + f * nj;
        const double *w = weights_all + f * nj, *turn = turn_all + 9 * f;
        double *rigid = rigid_all + at, *bent = bent_all + at, *out = out_all + at;
        double tol = tol_all[f], scale = scale_all[f];
        int64_t held_pelvis = user_mask_all[f * nj] > 0.0;
        int64_t goals[RIG_IK_MAX_JOINTS];
        double straight[RIG_IK_MAX_JOINTS], aims[3 * RIG_IK_MAX_JOINTS], err[RIG_IK_MAX_JOINTS];
        double move[3] = {0.0, 0.0, 0.0};
        if (moves) {  /* the floor shift (model units) in the rig's */
            double v[3] = {shift_all[2 * f] / scale, 0.0 / scale, shift_all[2 * f + 1] / scale};
            mat_vec(turn, v, move);
        }
        left[f] = 0;
        from_model(s, m, lengths, scale, turn, root_all + 3 * f, move, rigid);
        npe_keep_rigid(1, nj, s->rigid_layout, s->pelvis_weights, s->held_pelvis_weight,
                       s->carry_pelvis, s->carry_chest, rigid, start, &held_pelvis);
        memcpy(out, rigid, 3 * nj * sizeof(double));
        if (!refined) {
            const double *base = model + at, *per = offset_scales_all + f * nj;
            double moved_tol = s->moved_m / scale;
            for (int64_t j = 0; j < nj; j++) {
                double d[3];
                int64_t moved = mask[j] > 0.0 && axis_gap(t + 3 * j, start + 3 * j) > moved_tol;
                goals[j] = moved || (mask[j] > 0.0 && w[j] >= 1.0);
                straight[j] = moved ? s->network_straightest[j] : 1.0;
                for (int i = 0; i < 3; i++) d[i] = (m[3 * j + i] - base[3 * j + i]) / per[j];
                mat_vec(turn, d, aims + 3 * j);
                for (int i = 0; i < 3; i++)
                    aims[3 * j + i] = moved ? start[3 * j + i] + aims[3 * j + i] + move[i]
                                            : t[3 * j + i];
            }
            reach_once(s, out, goals, aims, lengths, tol, straight, 1.0, 1.0, 0);
        } else {
            int64_t any = 0, moved[RIG_IK_MAX_JOINTS];
            for (int64_t j = 0; j < nj; j++) {
                goals[j] = mask[j] > 0.0 && w[j] >= 1.0;
                any |= goals[j];
            }
            memcpy(bent, rigid, 3 * nj * sizeof(double));
            if (any) {
                reaim_both(s, bent, out, goals, t, lengths, tol);
                double miss = largest_error(nj, out, goals, t, err);
                int64_t straightened = 0;
                if (miss <= tol) {
                    goal_errors(nj, bent, goals, t, err);
                    moved_goals(nj, goals, t, start, tol * s->moved_per_tolerance, moved);
                    for (int64_t j = 0; j < nj; j++)
                        straightened |= moved[j] && s->hand_goals[j] && err[j] > tol;
                }
                left[f] = miss > tol || straightened;
            }
        }
        finish_errors(s, out, start, t, mask, w, user_mask_all + f * nj, errors_all + f * nj,
                      over_all ? over_all + f * nj : NULL,
                      other_all ? other_all + f * nj : NULL);
    }
    return 0;
}

/* ------------------------------------------------------------------ a solve's start */

/* One pose's start record (npe_start writes it, the later calls and solve_kernels'
 * _START_RECORD read it): its fields in order, 9 nj + 21 values. */
typedef struct {
    double *model, *root, *yaw, *lengths, *scale, *turn, *offset_scales, *rig_lengths,
        *rig_model, *familiarity, *spans;
} StartRecord;

static StartRecord start_record(int64_t nj, const double *record) {
    StartRecord r;
    r.model = (double *)record;
    r.root = r.model + 3 * nj;
    r.yaw = r.root + 3;
    r.lengths = r.yaw + 1;
    r.scale = r.lengths + nj;
    r.turn = r.scale + 1;
    r.offset_scales = r.turn + 9;
    r.rig_lengths = r.offset_scales + nj;
    r.rig_model = r.rig_lengths + nj;
    r.familiarity = r.rig_model + 3 * nj;
    r.spans = r.familiarity + 1;
    return r;
}

/* npe_request's answer (solve_kernels.SolveRequest._read reads it): the held mask and
 * weights (nj each), targets, network targets and rig targets (3 nj each), the floor shift
 * (2), then body follow, effector weight, least change and tolerance: 11 nj + 6 values. */
typedef struct {
    double *mask, *weights, *targets, *network_targets, *rig_targets, *shift, *follow,
        *effector_weight, *least_change, *tolerance;
} RequestOut;

static RequestOut request_out(int64_t nj, const double *out) {
    RequestOut r;
    r.mask = (double *)out;
    r.weights = r.mask + nj;
    r.targets = r.weights + nj;
    r.network_targets = r.targets + 3 * nj;
    r.rig_targets = r.network_targets + 3 * nj;
    r.shift = r.rig_targets + 3 * nj;
    r.follow = r.shift + 2;
    r.effector_weight = r.follow + 1;
    r.least_change = r.effector_weight + 1;
    r.tolerance = r.least_change + 1;
    return r;
}

/* What npe_start reads besides the poses: the skeleton and normalize's and the pipeline's
 * tables and constants. */
typedef struct {
    int64_t nj, chains;
    const int64_t *parents;  /* (nj) parents first */
    const double *canonical;  /* (nj) skeleton.BONE_LENGTHS */
    const int64_t *leg_bones;  /* (4) each side's shin and foot bones */
    const int64_t *across;  /* (4) left thigh, right thigh, left upper arm, right upper arm */
    const double *chain_weights;  /* (nj x chains) normalize._CHAIN_WEIGHTS */
    const double *chain_of;  /* (chains x nj) normalize._CHAIN_OF */
    const int64_t *chained;  /* (nj) normalize._CHAINED */
    const double *canonical_chains;  /* (chains) */
    double canonical_leg;
    const int64_t *feet;  /* (4) the ankles (left, right), then the toes */
    double toe_height, ankle_height;  /* pipeline.PLANTED_TOE_HEIGHT, PLANTED_ANKLE_HEIGHT */
    int64_t neck;
    double familiar_deg, unfamiliar_deg;  /* pipeline.FAMILIAR_TILT_DEG, UNFAMILIAR_... */
    const int64_t *rigid_pairs;  /* (2 x 6) refine._RIGID_PAIRS */
} StartShape;

/* pipeline._Start.of for each rig pose p (n x nj x 3): normalize.to_model_space_unchecked
 * (``model``, ``root``, ``yaw``, ``lengths``, ``scale``, ``turn``; lengths_in and scale_in
 * the rig's where given, else NULL: measured), pipeline._feet_down (feet, n x 2, 0 or 1), the
 * start's cached properties: normalize.offset_scales, the rig's lengths in model units, the
 * model pose with them, pipeline.familiarity and refine.rigid_spans. One record of
 * 9 nj + 21 values per pose in ``out`` (StartRecord). */
NPE_API int64_t npe_start(const StartShape *s, int64_t n, const double *p_all,
                          const double *lengths_in, const double *scale_in, double *out,
                          uint8_t *feet_all) {
    int64_t nj = s->nj, k = s->chains;
    if (nj > RIG_IK_MAX_JOINTS || k > 8) return -1;
    for (int64_t f = 0; f < n; f++) {
        const double *p = p_all + f * nj * 3;
        StartRecord r = start_record(nj, out + f * (9 * nj + 21));
        double *model = r.model, *root = r.root, *yaw_out = r.yaw, *lengths = r.lengths;
        double *scale_out = r.scale, *turn = r.turn, *offset = r.offset_scales;
        double *rig_lengths = r.rig_lengths, *rig_model = r.rig_model;
        double *familiar_out = r.familiarity, *spans = r.spans;
        double rel[3 * RIG_IK_MAX_JOINTS];
        if (lengths_in) {
            memcpy(lengths, lengths_in + f * nj, (size_t)nj * sizeof(double));
        } else {
            lengths[0] = 0.0;
            for (int64_t j = 1; j < nj; j++) lengths[j] = dist3(p + 3 * j, p + 3 * s->parents[j]);
        }
        double scale;
        if (scale_in) {
            scale = scale_in[f];
        } else {
            double leg = 0.0;
            for (int b = 0; b < 4; b++) leg += 0.5 * lengths[s->leg_bones[b]];
            scale = leg > EPS ? s->canonical_leg / leg : 1.0;
        }
        *scale_out = scale;
        const double origin[3] = {0.0, 0.0, 0.0};
        with_lengths(nj, s->parents, p, s->canonical, origin, rel);
        double ax = 0.0, az = 0.0;
        for (int side = 0; side < 2; side++) {
            const double *l = rel + 3 * s->across[2 * side], *r = rel + 3 * s->across[2 * side + 1];
            double v[3] = {l[0] - r[0], l[1] - r[1], l[2] - r[2]};
            double norm = sqrt(dot3(v, v));
            if (norm > EPS) { ax += v[0] / norm; az += v[2] / norm; }
        }
        double yaw = hypot(ax, az) > EPS ? -atan2(-az, ax) : 0.0, c = cos(yaw), sn = sin(yaw);
        double m[9] = {c, 0.0, -sn, 0.0, 1.0, 0.0, sn, 0.0, c};
        memcpy(turn, m, sizeof m);
        *yaw_out = yaw;
        for (int64_t j = 0; j < nj; j++) {
            mat_t_vec(turn, rel + 3 * j, model + 3 * j);
            model[3 * j + 1] += p[1] * scale;
        }
        root[0] = p[0]; root[1] = 0.0; root[2] = p[2];
        for (int side = 0; side < 2; side++)
            feet_all[2 * f + side] = model[3 * s->feet[2 + side] + 1] < s->toe_height ||
                                     model[3 * s->feet[side] + 1] < s->ankle_height;
        double per_chain[8];
        for (int64_t c2 = 0; c2 < k; c2++) {
            double chain = 0.0;
            for (int64_t j = 0; j < nj; j++) chain += lengths[j] * s->chain_weights[j * k + c2];
            per_chain[c2] = chain > EPS ? s->canonical_chains[c2] / chain : scale;
        }
        for (int64_t j = 0; j < nj; j++) {
            double v = 0.0;
            for (int64_t c2 = 0; c2 < k; c2++) v += per_chain[c2] * s->chain_of[c2 * nj + j];
            offset[j] = s->chained[j] ? v : scale;
            rig_lengths[j] = lengths[j] * scale;
        }
        with_lengths(nj, s->parents, model, rig_lengths, model, rig_model);
        double axis[3];
        for (int i = 0; i < 3; i++)
            axis[i] = model[3 * s->neck + i] -
                      (model[3 * s->feet[0] + i] + model[3 * s->feet[1] + i]) / 2.0;
        double len = sqrt(dot3(axis, axis)), cosine = axis[1] / (len > 1e-12 ? len : 1e-12);
        cosine = cosine < -1.0 ? -1.0 : cosine > 1.0 ? 1.0 : cosine;
        double tilt = acos(cosine) * (180.0 / 3.14159265358979323846);
        double familiar = (s->unfamiliar_deg - tilt) / (s->unfamiliar_deg - s->familiar_deg);
        *familiar_out = familiar < 0.0 ? 0.0 : familiar > 1.0 ? 1.0 : familiar;
        for (int r = 0; r < 6; r++)
            spans[r] = dist3(rig_model + 3 * s->rigid_pairs[r],
                                         rig_model + 3 * s->rigid_pairs[6 + r]);
    }
    return 0;
}

/* ------------------------------------------------------------------ reach bounds */

/* reach_bounds._beyond_reach_one: for each goal of one pose (21 x 3), how far its target
 * lies beyond the rig's reach from another goal's (over; 0 within every one) and which goal
 * that is (other; -1 where none); a pair counts against the goal whose target moved
 * further, ties to the first goal. pairs (s x 2): the fixed-distance joint pairs;
 * segments (nj * nj x width): each joint pair's path as indices into pairs, -1 padded. */
NPE_API void npe_beyond_reach(int64_t nj, int64_t s, int64_t width, const int64_t *pairs,
                              const int64_t *segments, const double *pose,
                              const int64_t *goals, const double *targets, double *over,
                              int64_t *other) {
    int64_t g[RIG_IK_MAX_JOINTS], k = 0;
    double fixed[64], moves[RIG_IK_MAX_JOINTS];
    for (int64_t j = 0; j < nj; j++) {
        over[j] = 0.0;
        other[j] = -1;
        if (goals[j]) g[k++] = j;
    }
    if (k < 2 || s > 64) return;
    for (int64_t i = 0; i < s; i++)
        fixed[i] = dist3(pose + 3 * pairs[2 * i], pose + 3 * pairs[2 * i + 1]);
    for (int64_t a = 0; a < k; a++) moves[a] = dist3(targets + 3 * g[a], pose + 3 * g[a]);
    for (int64_t a = 0; a < k; a++) {
        double most = 0.0;
        int64_t worst = -1;
        for (int64_t b = 0; b < k; b++) {
            if (!(moves[a] >= moves[b])) continue;
            double span = 0.0;
            const int64_t *path = segments + (g[a] * nj + g[b]) * width;
            for (int64_t i = 0; i < width && path[i] >= 0; i++) span += fixed[path[i]];
            double excess = dist3(targets + 3 * g[a], targets + 3 * g[b]) - span;
            if (excess > most) { most = excess; worst = g[b]; }
        }
        over[g[a]] = most;
        other[g[a]] = worst;
    }
}

/* ------------------------------------------------------------------ a drag's request */

/* What npe_request reads besides the poses: the pipeline's and refine's joints and
 * constants. */
typedef struct {
    int64_t nj;
    const int64_t *feet;  /* (4) the ankles (left, right), then the toes */
    const int64_t *ends;  /* (n_ends) refine._ENDS */
    int64_t n_ends, min_ends;  /* refine.FULL_BODY_MIN_ENDS */
    const int64_t *trunk;  /* (n_trunk) pipeline._TRUNK */
    int64_t n_trunk;
    double reach_tolerance, moved_m, full_body_move;
    double effector_weight, full_body_effector_weight, least_change, full_body_least_change;
} RequestShape;

/* PoseEditor._solve's effector request for one start pose (its start record, npe_start's),
 * before the networks and between them and the refinement: the planted feet held
 * (pipeline._hold_planted_feet, where ``plant``), the targets in model space per joint
 * scale (targets_to_model), the pelvis's floor shift taken out of them; then, ``refined``,
 * the targets on the rig's proportions and the refinement's weights (full_body_share,
 * body follow, effector_weights, least_change_weights). out: mask, weights (nj each),
 * targets, network targets, rig targets (3 nj each), shift (2), follow, effector weight,
 * least change, tolerance. */
NPE_API void npe_request(const RequestShape *s, const double *record, const uint8_t *feet_down,
                         const double *p, const double *mask_in, const double *t_in,
                         const double *w_in, int64_t plant, int64_t refined,
                         double body_follow, double *out) {
    int64_t nj = s->nj;
    StartRecord start = start_record(nj, record);
    RequestOut o = request_out(nj, out);
    const double *model = start.model, *turn = start.turn, *per = start.offset_scales;
    const double *rig_model = start.rig_model, familiarity = *start.familiarity;
    double scale = *start.scale;
    double *mask = o.mask, *w = o.weights, *t = o.targets, *t_net = o.network_targets;
    double *t_rig = o.rig_targets, *shift = o.shift;
    memcpy(mask, mask_in, (size_t)nj * sizeof(double));
    memcpy(w, w_in, (size_t)nj * sizeof(double));
    memcpy(t, t_in, 3 * (size_t)nj * sizeof(double));
    double tolerance = s->reach_tolerance / scale;
    if (plant) {
        for (int side = 0; side < 2; side++) {
            int64_t ankle = s->feet[side], toe = s->feet[2 + side];
            if (!(feet_down[side] && mask_in[toe] <= 0.0)) continue;
            int ankle_free = mask_in[ankle] <= 0.0;
            int held = ankle_free || dist3(t_in + 3 * ankle, p + 3 * ankle) <= tolerance;
            if (!held) continue;
            int64_t joints[2] = {toe, ankle};
            for (int k = 0; k < (ankle_free ? 2 : 1); k++) {
                int64_t j = joints[k];
                mask[j] = 1.0;
                w[j] = 1.0;
                memcpy(t + 3 * j, p + 3 * j, 3 * sizeof(double));
            }
        }
    }
    for (int64_t j = 0; j < nj; j++) {
        double d[3], turned[3];
        for (int i = 0; i < 3; i++) d[i] = t[3 * j + i] - p[3 * j + i];
        mat_t_vec(turn, d, turned);
        for (int i = 0; i < 3; i++) {
            t_net[3 * j + i] = model[3 * j + i] + turned[i] * per[j];
            t_rig[3 * j + i] = rig_model[3 * j + i] + turned[i] * scale;
        }
    }
    int root_held = mask[0] > 0.0;
    shift[0] = (t_net[0] - model[0]) * root_held;
    shift[1] = (t_net[2] - model[2]) * root_held;
    if (shift[0] != 0.0 || shift[1] != 0.0)
        for (int64_t j = 0; j < nj; j++) {
            t_net[3 * j] -= shift[0];
            t_net[3 * j + 2] -= shift[1];
        }
    double follow = 0.0, share = 0.0;
    if (refined) {
        int moving = 0, trunk = 0;
        for (int64_t j = 0; j < nj; j++) {
            int moved = mask[j] > 0.0 && axis_gap(t_rig + 3 * j, rig_model + 3 * j) > s->moved_m;
            moving |= moved;
            for (int64_t k = 0; k < s->n_trunk; k++) trunk |= moved && s->trunk[k] == j;
        }
        double moves[RIG_IK_MAX_JOINTS];
        for (int64_t e = 0; e < s->n_ends; e++) {
            int64_t j = s->ends[e];
            moves[e] = mask[j] > 0.0 ? dist3(t_rig + 3 * j, rig_model + 3 * j) : 0.0;
        }
        /* the min_ends-th largest: sorted ascending, as np.sort */
        for (int64_t a = 1; a < s->n_ends; a++)
            for (int64_t b = a; b > 0 && moves[b - 1] > moves[b]; b--) {
                double swap = moves[b]; moves[b] = moves[b - 1]; moves[b - 1] = swap;
            }
        share = moves[s->n_ends - s->min_ends] / s->full_body_move;
        share = share < 1.0 ? share : 1.0;
        double whole = trunk ? 1.0 : share;
        if (body_follow != 0.0 && moving && whole < 1.0) body_follow *= familiarity;
        follow = moving ? body_follow + (1.0 - body_follow) * whole : 0.0;
    }
    *o.follow = follow;
    *o.effector_weight = s->effector_weight *
                         pow(s->full_body_effector_weight / s->effector_weight, share);
    *o.least_change = s->least_change * pow(s->full_body_least_change / s->least_change, share);
    *o.tolerance = tolerance;
}

/* PoseEditor._solve up to the refinement for one start pose's effector request, in one call:
 * npe_request (into req_out), then, where an effector is left, the universal fused edit of
 * the networks' targets (the unmoved pass kept in ``cache``) into edited and latent, and
 * the decoded change on the input (``keep_details``; else the decoded pose alone) into pose
 * and its offset (float64). Returns 0, 1 where no effector is left (nothing run after the
 * request), -2 for networks that do not fit. */
NPE_API int64_t npe_begin(const RequestShape *s, const NpeMlp *encoder, const NpeMlp *solver,
                          const NpeDecoder *d, UnmovedCache *cache, const double *record,
                          const uint8_t *feet_down, const double *p, const double *mask_in,
                          const double *t_in, const double *w_in, int64_t plant,
                          int64_t refined, double body_follow, int64_t keep_details,
                          double *req_out, float *edited, float *latent, double *pose,
                          double *offset) {
    int64_t nj = s->nj, nd = 3 * nj;
    if (!universal_fits(encoder, solver, d) || d->mlp.n_out != nd) return -2;
    npe_request(s, record, feet_down, p, mask_in, t_in, w_in, plant, refined, body_follow,
                req_out);
    RequestOut o = request_out(nj, req_out);
    const double *mask = o.mask, *w = o.weights, *t_net = o.network_targets;
    int any = 0;
    for (int64_t j = 0; j < nj; j++) any |= mask[j] != 0.0;
    if (!any) return 1;
    universal_cached(encoder, solver, d, 1, cache, record, mask, t_net, w, edited, latent);
    for (int64_t i = 0; i < nd; i++) {
        offset[i] = keep_details ? record[i] - (double)edited[nd + i] : 0.0;
        pose[i] = offset[i] + (double)edited[i];
    }
    return 0;
}

/* npe_finish of one pose from its start record and its request (npe_request's answer), the
 * floor shift given (moved by it where ``moves``). */
static int64_t finish_one(const FinishShape *fs, int64_t refined, const double *pose,
                          const double *record, const double *p, const double *req_out,
                          const double *shift, int64_t moves, const double *user_mask,
                          double *rigid, double *bent, double *out, double *errors,
                          int64_t *left, double *over, int64_t *other) {
    StartRecord r = start_record(fs->nj, record);
    RequestOut o = request_out(fs->nj, req_out);
    return npe_finish(fs, 1, refined, pose, r.model, p, r.root, r.lengths, r.scale, r.turn,
                      r.offset_scales, shift, moves, o.targets, o.mask, o.weights, user_mask,
                      o.tolerance, rigid, bent, out, errors, left, over, other);
}

/* The refinement's arrays and constants for one pose (refine.RefineRun makes it once per
 * model set): the compiled decoder and its work, npe_refine_run's constants, the networks'
 * latent and the variables' start (filled per solve), its state and outputs. */
typedef struct {
    const NpeDecoder *d;
    float *work;
    int64_t rank;
    const int64_t *parents, *rigid;
    const double *prior;
    double rigid_scale, lm_start, lm_up;
    const double *basis;
    double *z_net, *v_net;
    float *latent_out, *decoded, *jac_f;
    double *raw, *jac_latent, *v, *v_try, *pose, *jac, *goal, *row_w, *rjac, *rres, *hess,
        *inverse, *cost, *damping, *scale;
    int64_t *stale;
} RefineRun;

/* A single solve in one call, PoseEditor._solve's steps for one start pose (its start record,
 * npe_start's) and an effector request: npe_begin (the request, the universal edit, the
 * decoded change), then
 * - rr NULL: npe_finish of the networks' answer (re-aimed), shifted by the floor shift where
 *   there is one;
 * - else the refinement (npe_refine_run, ``steps`` at most, from the networks' latent and
 *   the floor shift, on the rig's proportions: refine.refine's inputs as _solve gives them,
 *   read from the record and the request), then npe_finish of the refined pose less its
 *   floor shift, and where the re-aims leave a goal short, the least change
 *   (pipeline._reach_rest's rig IK stage; ``fallback``: not a drag update); left[0] = 1
 *   where the pose still needs its FABRIK stage; the refined latent is left in
 *   rr->latent_out and the variables in rr->v.
 * The outputs as npe_begin and npe_finish (one pose) take them. With ``ss`` (else NULL),
 * the start record and feet are made first (npe_start of p, with lengths_in and scale_in
 * as it takes them). Returns npe_begin's status (1: no effector left, nothing run after
 * the request), npe_refine_run's where it is not 0 (-1: a bone without direction, numpy
 * then; nothing finished), else npe_finish's; -3 for shapes of another skeleton. */
NPE_API int64_t npe_solve_one(
    const RequestShape *s, const NpeMlp *encoder, const NpeMlp *solver, const NpeDecoder *d,
    UnmovedCache *cache, double *record, uint8_t *feet_down, const double *p,
    const double *mask_in, const double *t_in, const double *w_in, int64_t plant,
    double body_follow, int64_t keep_details, double *req_out, float *edited, float *latent,
    double *pose, double *offset, const RefineRun *rr, int64_t steps, const FinishShape *fs,
    const double *user_mask, double *rigid, double *bent, double *out, double *errors,
    int64_t *left, double *over, int64_t *other, int64_t fallback, const StartShape *ss,
    const double *lengths_in, const double *scale_in) {
    int64_t nj = s->nj, refined = rr != NULL;
    if (nj != fs->nj || (ss && ss->nj != nj)) return -3;
    if (ss && npe_start(ss, 1, p, lengths_in, scale_in, record, feet_down) != 0) return -3;
    int64_t status = npe_begin(s, encoder, solver, d, cache, record, feet_down, p, mask_in,
                               t_in, w_in, plant, refined, body_follow, keep_details, req_out,
                               edited, latent, pose, offset);
    if (status != 0) return status;
    RequestOut o = request_out(nj, req_out);
    if (!refined)
        return finish_one(fs, 0, pose, record, p, req_out, o.shift,
                          o.shift[0] != 0.0 || o.shift[1] != 0.0, user_mask, rigid, bent, out,
                          errors, left, over, other);
    StartRecord r = start_record(nj, record);
    int64_t rank = rr->rank, nv = rank + 2, n_latent = rr->d->mlp.n_in;
    if (nv > REFINE_MAX_VARS) return -2;
    for (int64_t l = 0; l < n_latent; l++) rr->z_net[l] = (double)latent[l];
    for (int64_t k = 0; k < nv; k++) rr->v_net[k] = k < rank ? 0.0 : o.shift[k - rank];
    memcpy(rr->v, rr->v_net, (size_t)nv * sizeof(double));
    rr->stale[0] = 0;
    status = npe_refine_run(rr->d, rr->work, 1, nj, rank, steps, rr->parents, rr->rigid,
                            rr->prior, rr->rigid_scale, rr->lm_start, rr->lm_up, rr->z_net,
                            rr->basis, offset, rr->latent_out, rr->decoded, rr->jac_f, rr->raw,
                            rr->jac_latent, r.rig_lengths, rr->v, rr->v_net, rr->v_try,
                            r.rig_model, o.rig_targets, o.weights, o.follow,
                            o.effector_weight, o.least_change, r.spans, rr->pose, rr->jac,
                            rr->goal, rr->row_w, rr->rjac, rr->rres, rr->hess, rr->inverse,
                            rr->cost, rr->damping, rr->scale, rr->stale);
    if (status != 0) return status;
    const double *shift = rr->v + rank;  /* the floor shift: v's last two entries */
    double unshifted[POSE_DIM_MAX];
    for (int64_t j = 0; j < nj; j++) {
        unshifted[3 * j] = rr->pose[3 * j] - shift[0];
        unshifted[3 * j + 1] = rr->pose[3 * j + 1] - 0.0;
        unshifted[3 * j + 2] = rr->pose[3 * j + 2] - shift[1];
    }
    status = finish_one(fs, 1, unshifted, record, p, req_out, shift, 1, user_mask, rigid, bent,
                        out, errors, left, over, other);
    if (status != 0 || !left[0]) return status;
    int64_t goals[RIG_IK_MAX_JOINTS];
    for (int64_t j = 0; j < nj; j++) goals[j] = o.mask[j] > 0.0 && o.weights[j] >= 1.0;
    left[0] = least_change(fs, p, goals, o.targets, r.lengths, *o.tolerance, bent, out,
                           fallback);
    finish_errors(fs, out, p, o.targets, o.mask, o.weights, user_mask, errors, over, other);
    return 0;
}
