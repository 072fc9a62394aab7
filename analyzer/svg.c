/* analyzer/svg.c — the SVG primitives of svg.h. Coordinates are in user units of a fixed
 * 760 × 420 canvas (line charts); text is escaped; numbers are printed with %.2f. */
#include <stdbool.h>

#include "analyzer/svg.h"

#include <math.h>
#include <string.h>

enum { W = 760, H = 420, ML = 70, MR = 170, MT = 50, MB = 55 }; /* canvas and margins */

static void put_escaped(FILE *f, const char *s)
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

void mp_svg_bytes(char *buf, size_t cap, double bytes)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (fabs(bytes) >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, cap, u == 0 ? "%.0f %s" : "%.3g %s", bytes, unit[u]);
}

static void tick_label(char *buf, size_t cap, double v, bool bytes)
{
    if (bytes)
        mp_svg_bytes(buf, cap, v);
    else
        snprintf(buf, cap, "%.4g", v);
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
    put_escaped(f, c->id);
    fprintf(f, "\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            W, H, W, H, W, H);
    fprintf(f, "<text x=\"%d\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", ML);
    put_escaped(f, c->title);
    fprintf(f, "</text>\n");
    /* axes frame and ticks: 5 intervals on each axis */
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#444\"/>\n",
            ML, MT, W - ML - MR, H - MT - MB);
    char buf[64];
    for (int i = 0; i <= 5; i++) {
        double xv = c->x_min + (c->x_max - c->x_min) * i / 5, yv = c->y_min + (c->y_max - c->y_min) * i / 5;
        double px = sx(c, xv), py = sy(c, yv);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#ddd\"/>\n", px, MT,
                px, H - MB);
        fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#ddd\"/>\n", ML, py,
                W - MR, py);
        tick_label(buf, sizeof buf, xv, c->x_bytes);
        fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", px, H - MB + 15, buf);
        tick_label(buf, sizeof buf, yv, false);
        fprintf(f, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\">%s</text>\n", ML - 5, py + 4, buf);
        if (c->top_label) {
            tick_label(buf, sizeof buf, xv * c->top_scale, c->top_bytes);
            fprintf(f, "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n",
                    px, MT - 5, buf);
        }
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", (W - MR + ML) / 2, H - 12);
    put_escaped(f, c->x_label);
    fprintf(f, "</text>\n<text transform=\"translate(16 %d) rotate(-90)\" text-anchor=\"middle\">",
            (H - MB + MT) / 2);
    put_escaped(f, c->y_label);
    fprintf(f, "</text>\n");
    if (c->top_label) {
        fprintf(f, "<text x=\"%d\" y=\"32\" text-anchor=\"middle\" fill=\"#555\">", (W - MR + ML) / 2);
        put_escaped(f, c->top_label);
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
        const int ly = MT + 12 + 16 * k;
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>",
                W - MR + 10, ly - 4, W - MR + 30, ly - 4, x->color,
                x->dashed ? " stroke-dasharray=\"5 3\"" : "");
        fprintf(f, "<text x=\"%d\" y=\"%d\">", W - MR + 35, ly);
        put_escaped(f, x->label);
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

void mp_svg_heatmap(FILE *f, const char *id, const char *title, const double *value, int rows,
                    int cols, int col_scale, const char *const *row_labels, const char *x_label,
                    const char *y_label)
{
    const int left = 110, top = 40, right = 20, bottom = 45, plot_w = 640;
    const double cw = (double)plot_w / cols;
    const double ch = rows <= 64 ? 10 : 640.0 / rows;
    const int w = left + plot_w + right, h = top + (int)(ch * rows + 0.5) + bottom;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"");
    put_escaped(f, id);
    fprintf(f, "\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"10\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            w, h, w, h, w, h);
    fprintf(f, "<text x=\"%d\" y=\"18\" font-size=\"14\" font-weight=\"bold\">", left);
    put_escaped(f, title);
    fprintf(f, "</text>\n");
    const int label_every = rows > 32 ? (rows + 31) / 32 : 1;
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) {
            int rgb[3];
            ramp(value[(size_t)r * (size_t)cols + (size_t)c], rgb);
            fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                       "fill=\"#%02x%02x%02x\"/>",
                    left + c * cw, top + r * ch, cw + 0.05, ch + 0.05, rgb[0], rgb[1], rgb[2]);
        }
        fputc('\n', f);
        if (r % label_every == 0) {
            fprintf(f, "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\">", left - 4, top + r * ch + ch * 0.8);
            put_escaped(f, row_labels[r]);
            fprintf(f, "</text>\n");
        }
    }
    const int col_every = cols > 16 ? cols / 8 : 1;
    for (int c = 0; c < cols; c += col_every)
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\">%d</text>\n",
                left + (c + 0.5) * cw, top + rows * ch + 12, c * col_scale);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">", left + plot_w / 2, h - 8);
    put_escaped(f, x_label);
    fprintf(f, "</text>\n<text transform=\"translate(12 %d) rotate(-90)\" text-anchor=\"middle\">",
            top + (int)(rows * ch / 2));
    put_escaped(f, y_label);
    fprintf(f, "</text>\n</svg>\n");
}
