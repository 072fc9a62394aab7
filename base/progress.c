/* base/progress.c — the progress line (see progress.h). Draws only into the stream the command
 * chose; everything here is best effort (a failed write to stderr is not an error of the step). */
#include "base/progress.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define REDRAW_NS INT64_C(100000000)   /* a terminal: at most 10 lines a second */
#define LOG_EVERY_NS INT64_C(10000000000) /* a log: a line every 10 s */
#define CHECK_AHEAD_NS 50e6              /* read the clock again after about 50 ms of work */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

FILE *mp_progress_stream(mp_progress_mode mode)
{
    if (mode == MP_PROGRESS_ON || (mode == MP_PROGRESS_AUTO && isatty(STDERR_FILENO)))
        return stderr;
    return NULL;
}

void mp_progress_begin(mp_progress *p, FILE *out, const char *label, const char *unit,
                       int64_t total)
{
    memset(p, 0, sizeof *p);
    p->out = out;
    p->tty = out && isatty(fileno(out));
    snprintf(p->label, sizeof p->label, "%s", label);
    p->unit = unit;
    p->total = total > 0 ? total : 0;
    p->t0_ns = p->last_line_ns = now_ns();
}

void mp_progress_count2(mp_progress *p, const char *unit2)
{
    if (p && p->out) {
        p->unit2 = unit2;
        p->done2 = 0;
    }
}

void mp_progress_next(mp_progress *p, const char *label, const char *unit, int64_t total)
{
    if (!p || !p->out)
        return;
    FILE *out = p->out;
    mp_progress_end(p);
    mp_progress_begin(p, out, label, unit, total);
}

void mp_progress_set_total(mp_progress *p, int64_t total)
{
    if (p)
        p->total = total > 0 ? total : 0;
}

void mp_progress_detail(mp_progress *p, const char *fmt, ...)
{
    if (!p || !p->out)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->detail, sizeof p->detail, fmt, ap);
    va_end(ap);
}

static bool is_bytes(const mp_progress *p)
{
    return p->unit && !strcmp(p->unit, MP_PROGRESS_BYTES);
}

/* "1:05" or "2:03:09" */
static void clock_text(char *buf, size_t cap, double s)
{
    const long long t = s > 0 ? (long long)(s + 0.5) : 0;
    if (t >= 3600)
        snprintf(buf, cap, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, cap, "%lld:%02lld", t / 60, t % 60);
}

/* The line, without \r or newline. */
static void format_line(const mp_progress *p, int64_t t_ns, char *buf, size_t cap)
{
    const double elapsed_s = (double)(t_ns - p->t0_ns) * 1e-9;
    const double rate = elapsed_s > 0 ? (double)p->done / elapsed_s : 0;
    size_t n = 0;
#define PUT(...) (n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__))
    PUT("%s: ", p->label);
    if (!p->unit) { /* a step that cannot be counted: what it is and how long it has run */
        char t[32];
        clock_text(t, sizeof t, elapsed_s);
        PUT("%s%s%s elapsed", p->detail, p->detail[0] ? ", " : "", t);
        return;
    }
    if (is_bytes(p)) {
        const double scale = (p->total ? p->total : p->done) >= (INT64_C(1) << 30) ? 1073741824.0 : 1048576.0;
        const char *u = scale > 1048576.0 ? "GiB" : "MiB";
        if (p->total)
            PUT("%.*f/%.*f %s", scale > 1048576.0 ? 2 : 1, (double)p->done / scale,
                scale > 1048576.0 ? 2 : 1, (double)p->total / scale, u);
        else
            PUT("%.*f %s", scale > 1048576.0 ? 2 : 1, (double)p->done / scale, u);
    } else if (p->total) {
        PUT("%lld/%lld %s", (long long)p->done, (long long)p->total, p->unit);
    } else {
        PUT("%lld %s", (long long)p->done, p->unit);
    }
    if (p->total)
        PUT(" (%.1f %%)", 100.0 * (double)p->done / (double)p->total);
    if (is_bytes(p))
        PUT(", %.1f MiB/s", rate / 1048576.0);
    else if (rate >= 1e6)
        PUT(", %.2f M %s/s", rate / 1e6, p->unit);
    else if (rate >= 1e4)
        PUT(", %.1f k %s/s", rate / 1e3, p->unit);
    else
        PUT(", %.1f %s/s", rate, p->unit);
    if (p->unit2)
        PUT(", %lld %s (%.1f %s/s)", (long long)p->done2, p->unit2,
            elapsed_s > 0 ? (double)p->done2 / elapsed_s : 0.0, p->unit2);
    if (p->detail[0])
        PUT(", %s", p->detail);
    char t[32];
    clock_text(t, sizeof t, elapsed_s);
    PUT(", %s elapsed", t);
    if (p->total && p->done > 0 && p->done < p->total) {
        clock_text(t, sizeof t, elapsed_s * (double)(p->total - p->done) / (double)p->done);
        PUT(", ETA %s", t);
    }
#undef PUT
}

static void draw(mp_progress *p, int64_t t_ns, bool final)
{
    char line[512];
    format_line(p, t_ns, line, sizeof line);
    if (p->tty) /* \033[K clears what a longer earlier line left */
        fprintf(p->out, "\r%s\033[K%s", line, final ? "\n" : "");
    else
        fprintf(p->out, "%s\n", line);
    fflush(p->out);
    p->line_open = p->tty && !final;
    p->last_line_ns = t_ns;
}

void mp_progress_poll(mp_progress *p)
{
    if (!p || !p->out)
        return;
    const int64_t t = now_ns();
    const double elapsed_s = (double)(t - p->t0_ns) * 1e-9;
    const double per_s = (double)p->done / (elapsed_s > 1e-3 ? elapsed_s : 1e-3);
    const double ahead = per_s * CHECK_AHEAD_NS * 1e-9;
    p->next_check = p->done + (ahead >= 1 ? (int64_t)ahead : 1);
    if (t - p->last_line_ns >= (p->tty ? REDRAW_NS : LOG_EVERY_NS))
        draw(p, t, false);
}

void mp_progress_end(mp_progress *p)
{
    if (!p || !p->out)
        return;
    /* a terminal keeps the line only if the step lasted long enough to draw one */
    if (!p->tty || p->line_open)
        draw(p, now_ns(), true);
    p->out = NULL;
}
