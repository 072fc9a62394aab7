/* base/svg.h — a very small SVG writer for the charts of the analyzer's and the simulator's
 * reports: line charts with axes, round ticks (1-2-5 steps; whole numbers on integer axes) and a
 * legend, and rectangles for heat maps with a colour bar. Output is plain SVG 1.1 text (no scripts, no
 * external references) so that it embeds in the HTML report as is.
 */
#ifndef MP_BASE_SVG_H
#define MP_BASE_SVG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Text into SVG or HTML: <, >, & and " as entities (chart labels, and the report page's own text). */
void mp_svg_put_escaped(FILE *f, const char *s);

typedef struct mp_svg_series {
    const char *label;
    const double *x, *y; /* (n) */
    int n;
    const char *color;
    bool dashed;
    bool markers; /* a dot at every point (short series: a lone point draws no line) */
} mp_svg_series;

typedef struct mp_svg_chart {
    const char *id;      /* element id of the <svg> (the HTML test looks for it) */
    const char *title;
    const char *x_label, *y_label;
    double x_min, x_max, y_min, y_max;
    /* optional second x axis along the top: value = x * top_scale, labelled top_label */
    const char *top_label;
    double top_scale;
    bool x_bytes, top_bytes; /* format tick labels as byte sizes (KiB, MiB, GiB) */
    bool x_integer, top_integer; /* counts (experts, segments): ticks on whole numbers only */
    bool x_pow2;           /* x is log2 of the value: ticks on whole exponents, labelled 2^x */
} mp_svg_chart;

void mp_svg_line_chart(FILE *f, const mp_svg_chart *c, const mp_svg_series *s, int n_series);

/* Heat map: rows × cols cells, value (rows, cols) in [0, 1] (colour scale); column c is labelled
 * c × col_scale (its first expert when experts are grouped). Rows are at least
 * MP_SVG_MIN_ROW_PX tall (the chart grows with the layer count). The colour bar beside it is
 * labelled with scale_labels[i] at value i / (n_scale - 1). */
#define MP_SVG_MIN_ROW_PX 14
typedef struct mp_svg_heat {
    const char *id, *title, *x_label, *y_label;
    const double *value; /* (rows, cols) */
    int rows, cols, col_scale;
    const char *const *row_labels; /* (rows) */
    const char *scale_title;
    const char *const *scale_labels; /* (n_scale) */
    int n_scale;
} mp_svg_heat;
void mp_svg_heatmap(FILE *f, const mp_svg_heat *h);

/* Round tick values over [lo, hi]: a 1-2-5 step times a power of ten (of 1024 for bytes, in the
 * unit of hi), at least 1 when integer; at most max ticks. Returns how many. */
int mp_svg_ticks(double lo, double hi, bool integer, bool bytes, double *out, int max);

/* Format a byte count as "512 B", "1.5 KiB", "3.2 GiB" (3 significant digits, at least the
 * integer part). */
void mp_svg_bytes(char *buf, size_t cap, double bytes);
/* The same with sig significant digits. */
void mp_svg_bytes_sig(char *buf, size_t cap, double bytes, int sig);
/* Labels for n byte counts that tell them apart: the fewest significant digits (3 or more) at
 * which distinct counts get distinct labels, exact bytes ("1000001 B") where no precision does.
 * label[i] holds cap bytes. */
void mp_svg_bytes_labels(char *label, size_t cap, const double *bytes, int n);

#endif
