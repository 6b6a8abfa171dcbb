/* Exact reach, the rigid branches and the reach bounds.
 * Part of npe_native.c's single translation unit (included there, not compiled alone). */
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

/* exact_reach._shrug_to_hands for one pose (straight (nj): each hand's straightest share). */
static void shrug_to_hands(const Reach *r, double *p, const int64_t *goal, const double *t,
                           const double *lengths, const double *straight) {
    const int64_t *at = r->at;
    for (int k = 0; k < 2; k++) {
        int64_t clav = at[L_CLAVICLE + k], shoulder = at[L_SHOULDER + k];
        int64_t elbow = at[L_ELBOW + k], hand = at[L_HAND + k];
        if (!goal[hand] || goal[clav] || goal[shoulder] || goal[elbow]) continue;
        double most = 1.0 - r->settle_slack < straight[hand] ? 1.0 - r->settle_slack
                                                              : straight[hand];
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
 * (n, nj, 3); lengths (n, nj); tol (n); straight (n, nj): each goal's straightest share
 * (the shrug's too); settle_straightest: the settling's; bend_trunk. */
NPE_API int64_t npe_exact_reach(
    int64_t n, int64_t nj, const int64_t *layout, const int64_t *masks, double *pose,
    const int64_t *goals, const double *targets, const double *lengths_all,
    const double *tol_all, const double *straight_all, double settle_straightest,
    int64_t bend_trunk, double slack, double settle_slack,
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
        if (bend_trunk) shrug_to_hands(&r, p, goal, t, lengths, straight);
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
