/* Small vector algebra, quaternions and rotation fits shared by every kernel.
 * Part of npe_native.c's single translation unit (included there, not compiled alone). */
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
