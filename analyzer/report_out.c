/* analyzer/report_out.c — what the report's writers share: the checked output stream of one
 * report file (report.h's mp_an_out over base/atomic_file.h) and the rank-threshold chart's
 * representative nodes, which the CSV table and the chart list alike. */
#include <stdbool.h>
#include <stdio.h>

#include "analyzer/report.h"

FILE *mp_an_open_out(mp_an_out *o, const char *dir, const char *name, mp_error *err)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    o->f = NULL;
    if (mp_outfile_open(&o->file, path, "report file", MP_OUT_DIRECT, err))
        return NULL;
    return o->f = mp_outfile_stream(&o->file, err);
}

mp_status mp_an_close_out(mp_an_out *o, mp_error *err)
{
    o->f = NULL;
    return mp_outfile_commit(&o->file, err);
}

void mp_an_abort_out(mp_an_out *o)
{
    o->f = NULL;
    mp_outfile_abort(&o->file);
}

int mp_an_representative_nodes(int32_t n_nodes, int32_t out[5])
{
    int n = 0;
    const int32_t cand[5] = {0, n_nodes / 4, n_nodes / 2, (3 * n_nodes) / 4, n_nodes - 1};
    for (int i = 0; i < 5; i++) {
        bool dup = false;
        for (int j = 0; j < n; j++)
            dup |= out[j] == cand[i];
        if (!dup && cand[i] >= 0 && cand[i] < n_nodes)
            out[n++] = cand[i];
    }
    return n;
}
