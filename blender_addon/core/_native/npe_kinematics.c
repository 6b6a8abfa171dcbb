/* Forward kinematics, positions -> rotations and rig IK.
 * Part of npe_native.c's single translation unit (included there, not compiled alone). */
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
