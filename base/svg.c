/* base/svg.c — the SVG primitives of svg.h. Coordinates are in user units of a fixed
 * 760 × 420 canvas (line charts); text is escaped; numbers are printed with %.2f. */
#include <stdbool.h>

#include "base/svg.h"

#include <math.h>
#include <string.h>

enum { W = 760, H = 420, ML = 70, MR = 170, MT = 50, MB = 55 }; /* canvas and margins */

void mp_svg_put_escaped(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

void mp_svg_bytes_sig(char *buf, size_t cap, double bytes, int sig)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (fabs(bytes) >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    /* %g would print 1000 MiB as "1e+03": never fewer digits than the integer part has */
    const int int_digits = fabs(bytes) >= 1 ? (int)floor(log10(fabs(bytes))) + 1 : 1;
    if (u == 0)
        snprintf(buf, cap, "%.0f %s", bytes, unit[u]);
    else
        snprintf(buf, cap, "%.*g %s", sig > int_digits ? sig : int_digits, bytes, unit[u]);
}

void mp_svg_bytes(char *buf, size_t cap, double bytes)
{
    mp_svg_bytes_sig(buf, cap, bytes, 3);
}

void mp_svg_bytes_labels(char *label, size_t cap, const double *bytes, int n)
{
    /* 17 significant digits tell every pair of doubles apart; bytes are exact far below that */
    for (int sig = 3; sig <= 17; sig++) {
        for (int i = 0; i < n; i++)
            mp_svg_bytes_sig(label + (size_t)i * cap, cap, bytes[i], sig);
        bool distinct = true;
        for (int i = 0; i < n && distinct; i++)
            for (int j = i + 1; j < n && distinct; j++)
                distinct = bytes[i] == bytes[j] || strcmp(label + (size_t)i * cap, label + (size_t)j * cap);
        if (distinct)
            return;
    }
    for (int i = 0; i < n; i++)
        snprintf(label + (size_t)i * cap, cap, "%.0f B", bytes[i]);
}

int mp_svg_ticks(double lo, double hi, bool integer, bool bytes, double *out, int max)
{
    if (!(hi > lo) || max < 2) {
        out[0] = lo;
        return 1;
    }
    double unit = 1;
    if (bytes)
        while (hi / unit >= 1024 && unit < 1099511627776.0)
            unit *= 1024;
    /* the smallest 1-2-5 step giving at most max - 1 intervals */
    const double raw = (hi - lo) / unit / (max - 1);
    double mag = pow(10, floor(log10(raw)));
    double step = mag;
    static const double mult[] = {1, 2, 5, 10};
    for (int i = 0; i < 4; i++)
        if (mult[i] * mag >= raw * (1 - 1e-9)) {
            step = mult[i] * mag;
            break;
        }
    step *= unit;
    if (integer && step < 1)
        step = 1;
    int n = 0;
    for (double k = ceil(lo / step - 1e-9); n < max; k++) {
        const double v = k * step;
        if (v > hi + step * 1e-9)
            break;
        out[n++] = fabs(v) < step * 1e-9 ? 0 : v; /* never "-0" */
    }
    return n;
}

static void tick_label(char *buf, size_t cap, double v, bool bytes, bool pow2)
{
    if (bytes)
        mp_svg_bytes_sig(buf, cap, v, 4);
    else if (pow2)
        snprintf(buf, cap, "%.0f", pow(2, v));
    else /* whole numbers up to a billion as such: 15000, not 1.5e+04 */
        snprintf(buf, cap, fabs(v) >= 1e4 && fabs(v) < 1e9 && v == floor(v) ? "%.0f" : "%.4g", v);
}

static double sx(const mp_svg_chart *c, double x)
{
    double span = c->x_max > c->x_min ? c->x_max - c->x_min : 1;
    return ML + (x - c->x_min) / span * (W - ML - MR);
}

static double sy(const mp_svg_chart *c, double y)
{
    double span = c->y_max > c->y_min ? c->y_max - c->y_min : 1;
    return H - MB - (y - c->y_min) / span * (H - MT - MB);
}

void mp_svg_line_chart(FILE *f, const mp_svg_chart *c, const mp_svg_series *s, int n_series)
{
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"");
    mp_svg_put_escaped(f, c->id);
    fprintf(f, "\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            W, H, W, H, W, H);
    fprintf(f, "<text x=\"%d\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", ML);
    mp_svg_put_escaped(f, c->title);
    fprintf(f, "</text>\n");
    /* axes frame and round ticks */
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n",
            ML, MT, W - ML - MR, H - MT - MB);
    char buf[64];
    double tick[12];
    int n = mp_svg_ticks(c->x_min, c->x_max, c->x_integer || c->x_pow2, c->x_bytes, tick, 8);
    for (int i = 0; i < n; i++) {
        const double px = sx(c, tick[i]);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#ddd\"/>\n", px, MT,
                px, H - MB);
        tick_label(buf, sizeof buf, tick[i], c->x_bytes, c->x_pow2);
        fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", px, H - MB + 15, buf);
    }
    n = mp_svg_ticks(c->y_min, c->y_max, false, false, tick, 7);
    for (int i = 0; i < n; i++) {
        const double py = sy(c, tick[i]);
        fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#ddd\"/>\n", ML, py,
                W - MR, py);
        tick_label(buf, sizeof buf, tick[i], false, false);
        fprintf(f, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", ML - 5, py + 4, buf);
    }
    if (c->top_label && c->top_scale > 0) {
        /* the top axis has its own round values, placed where x * top_scale reaches them */
        n = mp_svg_ticks(c->x_min * c->top_scale, c->x_max * c->top_scale, c->top_integer,
                         c->top_bytes, tick, 8);
        for (int i = 0; i < n; i++) {
            tick_label(buf, sizeof buf, tick[i], c->top_bytes, false);
            fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n",
                    sx(c, tick[i] / c->top_scale), MT - 5, buf);
        }
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (W - MR + ML) / 2, H - 12);
    mp_svg_put_escaped(f, c->x_label);
    fprintf(f, "</text>\n<text transform=\"translate(16 %d) rotate(-90)\" text-anchor=\"middle\">",
            (H - MB + MT) / 2);
    mp_svg_put_escaped(f, c->y_label);
    fprintf(f, "</text>\n");
    if (c->top_label && c->top_scale > 0) {
        fprintf(f, "<text x=\"%d\" y=\"32\" text-anchor=\"middle\" fill=\"#555\">", (W - MR + ML) / 2);
        mp_svg_put_escaped(f, c->top_label);
        fprintf(f, "</text>\n");
    }
    for (int k = 0; k < n_series; k++) {
        const mp_svg_series *x = &s[k];
        fprintf(f, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s "
                   "points=\"",
                x->color, x->dashed ? " stroke-dasharray=\"5 3\"" : "");
        for (int i = 0; i < x->n; i++)
            fprintf(f, "%.2f,%.2f ", sx(c, x->x[i]), sy(c, x->y[i]));
        fprintf(f, "\"/>\n");
        for (int i = 0; x->markers && i < x->n; i++)
            fprintf(f, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\" fill=\"%s\"/>", sx(c, x->x[i]),
                    sy(c, x->y[i]), x->color);
        const int ly = MT + 12 + 16 * k;
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>",
                W - MR + 10, ly - 4, W - MR + 30, ly - 4, x->color,
                x->dashed ? " stroke-dasharray=\"5 3\"" : "");
        fprintf(f, "<text x=\"%d\" y=\"%d\">", W - MR + 35, ly);
        mp_svg_put_escaped(f, x->label);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
}

/* A perceptually ordered ramp (dark blue -> teal -> yellow), by linear interpolation. */
static void ramp(double v, int rgb[3])
{
    static const int stops[4][3] = {{30, 30, 90}, {30, 120, 140}, {120, 190, 90}, {250, 230, 60}};
    v = v < 0 ? 0 : v > 1 ? 1 : v;
    double p = v * 3;
    int i = (int)p;
    if (i > 2)
        i = 2;
    double t = p - i;
    for (int c = 0; c < 3; c++)
        rgb[c] = (int)(stops[i][c] + (stops[i + 1][c] - stops[i][c]) * t + 0.5);
}

void mp_svg_heatmap(FILE *f, const mp_svg_heat *h)
{
    /* margins: row labels and the y title on the left, the colour bar on the right */
    const int left = 110, top = 40, bottom = 50, plot_w = 600, bar_x = left + plot_w + 30, bar_w = 16;
    const int w = bar_x + bar_w + 64;
    const double cw = (double)plot_w / h->cols;
    /* rows share about 560 px, but never fall below the legible minimum nor grow past 28 */
    double ch = 560.0 / h->rows;
    ch = ch < MP_SVG_MIN_ROW_PX ? MP_SVG_MIN_ROW_PX : ch > 28 ? 28 : ch;
    const double plot_h = ch * h->rows;
    /* the colour bar keeps room for its labels even beside a single row */
    const double bar_h = plot_h < 140 ? 140 : plot_h > 320 ? 320 : plot_h;
    const int total_h = top + (int)((plot_h > bar_h ? plot_h : bar_h) + 0.5) + bottom;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"");
    mp_svg_put_escaped(f, h->id);
    fprintf(f, "\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            w, total_h, w, total_h, w, total_h);
    fprintf(f, "<text x=\"%d\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", left);
    mp_svg_put_escaped(f, h->title);
    fprintf(f, "</text>\n");
    for (int r = 0; r < h->rows; r++) {
        for (int c = 0; c < h->cols; c++) {
            int rgb[3];
            ramp(h->value[(size_t)r * (size_t)h->cols + (size_t)c], rgb);
            fprintf(f, "<rect class=\"cell\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                       "fill=\"#%02x%02x%02x\"/>",
                    left + c * cw, top + r * ch, cw + 0.05, ch + 0.05, rgb[0], rgb[1], rgb[2]);
        }
        fputc('\n', f);
        fprintf(f, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\">", left - 4, top + r * ch + ch / 2 + 4);
        mp_svg_put_escaped(f, h->row_labels[r]);
        fprintf(f, "</text>\n");
    }
    /* column ticks: round expert ids at the left edge of their column */
    double tick[12];
    const int n = mp_svg_ticks(0, (double)(h->cols * h->col_scale), true, false, tick, 9);
    for (int i = 0; i < n; i++) {
        const double x = left + tick[i] / h->col_scale * cw;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#444\"/>", x,
                top + plot_h, x, top + plot_h + 4);
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%.0f</text>\n", x,
                top + plot_h + 16, tick[i]);
    }
    fprintf(f, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"middle\">", left + plot_w / 2, top + plot_h + 36);
    mp_svg_put_escaped(f, h->x_label);
    fprintf(f, "</text>\n<text transform=\"translate(16 %d) rotate(-90)\" text-anchor=\"middle\">",
            top + (int)(plot_h / 2));
    mp_svg_put_escaped(f, h->y_label);
    fprintf(f, "</text>\n");
    /* colour bar: the ramp in 32 steps, top = 1, labelled at the scale's values */
    fprintf(f, "<g id=\"");
    mp_svg_put_escaped(f, h->id);
    fprintf(f, "-scale\"><text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", bar_x + bar_w / 2, top - 8);
    mp_svg_put_escaped(f, h->scale_title);
    fprintf(f, "</text>\n");
    for (int i = 0; i < 32; i++) {
        int rgb[3];
        ramp(1 - (i + 0.5) / 32, rgb);
        fprintf(f, "<rect x=\"%d\" y=\"%.2f\" width=\"%d\" height=\"%.2f\" fill=\"#%02x%02x%02x\"/>",
                bar_x, top + bar_h * i / 32, bar_w, bar_h / 32 + 0.05, rgb[0], rgb[1], rgb[2]);
    }
    fprintf(f, "\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%.2f\" fill=\"none\" stroke=\"#444\"/>\n",
            bar_x, top, bar_w, bar_h);
    for (int i = 0; i < h->n_scale; i++) {
        const double y = top + bar_h * (1 - (double)i / (h->n_scale - 1));
        fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#444\"/>"
                   "<text x=\"%d\" y=\"%.2f\">",
                bar_x + bar_w, y, bar_x + bar_w + 4, y, bar_x + bar_w + 6, y + 4);
        mp_svg_put_escaped(f, h->scale_labels[i]);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</g>\n</svg>\n");
}
