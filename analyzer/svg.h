/* analyzer/svg.h — a very small SVG writer for the report's charts: line charts with axes,
 * ticks and a legend, and rectangles for heat maps. Output is plain SVG 1.1 text (no scripts, no
 * external references) so that it embeds in the HTML report as is.
 */
#ifndef MP_ANALYZER_SVG_H
#define MP_ANALYZER_SVG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct mp_svg_series {
    const char *label;
    const double *x, *y; /* (n) */
    int n;
    const char *color;
    bool dashed;
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
} mp_svg_chart;

void mp_svg_line_chart(FILE *f, const mp_svg_chart *c, const mp_svg_series *s, int n_series);

/* Heat map: rows × cols cells, value (rows, cols) in [0, 1] (colour scale); column c is labelled
 * c × col_scale (its first expert when experts are grouped). */
void mp_svg_heatmap(FILE *f, const char *id, const char *title, const double *value, int rows,
                    int cols, int col_scale, const char *const *row_labels, const char *x_label,
                    const char *y_label);

/* Format a byte count as "512 B", "1.5 KiB", "3.2 GiB". */
void mp_svg_bytes(char *buf, size_t cap, double bytes);

#endif
