/* base/progress.h — the progress line of a long step: how much is done of how much, the rate,
 * the time elapsed and the ETA, on stderr. Every command's progress goes through here (collect,
 * import, analyze, trace materialize, model hashing, calibrate, mkmodel).
 *
 * Who decides what: the command chooses whether a line is drawn at all (mp_progress_stream: a
 * terminal, or asked for with --progress; never with --no-progress) and owns the mp_progress;
 * the library code doing the work only counts into it (mp_progress_set / mp_progress_add, a
 * NULL progress or one without a stream counts nothing), so that library code never decides to
 * print.
 *
 * What is drawn:
 *  - on a terminal, one line redrawn in place (\r) at most 10 times a second, and kept (ended by
 *    a newline) by mp_progress_end;
 *  - on anything else (a log, a pipe: only when asked for), a line every 10 s and the final one.
 * A line reads `LABEL: DONE/TOTAL UNIT (PCT %), RATE UNIT/s, COUNT2 UNIT2 (RATE2 UNIT2/s),
 * DETAIL, M:SS elapsed, ETA M:SS`; without a total, no percentage and no ETA; the second count
 * (what is found along the way: tokens beside prompts, records beside bytes) only when the step
 * has one. The unit MP_PROGRESS_BYTES prints sizes in MiB/GiB; a step without a unit (one that
 * cannot be counted, such as one SQL statement) shows `LABEL: DETAIL, M:SS elapsed`.
 *
 * Cost: the clock is read only when the count reaches next_check, which is placed about 50 ms of
 * work ahead at the rate measured so far, so counting once per record costs a compare.
 */
#ifndef MP_BASE_PROGRESS_H
#define MP_BASE_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum mp_progress_mode {
    MP_PROGRESS_AUTO = 0, /* the default: a line only when stderr is a terminal */
    MP_PROGRESS_ON,       /* --progress: also into a log or a pipe */
    MP_PROGRESS_OFF,      /* --no-progress */
} mp_progress_mode;

#define MP_PROGRESS_BYTES "bytes" /* unit: done and total are bytes, printed as MiB/GiB */

typedef struct mp_progress {
    FILE *out;            /* NULL: silent (counting is a no-op) */
    bool tty;             /* out is a terminal: the line is redrawn in place */
    bool line_open;       /* tty: a line is drawn and not yet ended by a newline */
    char label[64];       /* "import", "sha256 model.gguf", ... */
    char detail[96];      /* the caller's extra ("1234 tokens, 45.6 tok/s"), "" if none */
    const char *unit;     /* "records", "prompts", MP_PROGRESS_BYTES, ...; NULL: not counted */
    const char *unit2;    /* the second count's unit, NULL if none */
    int64_t total;        /* 0: unknown (no percentage, no ETA) */
    int64_t done;         /* counted so far; next_check > done between polls */
    int64_t done2;        /* the second count */
    int64_t next_check;
    int64_t t0_ns, last_line_ns;
} mp_progress;

/* stderr for ON, and for AUTO when stderr is a terminal; NULL otherwise. */
FILE *mp_progress_stream(mp_progress_mode mode);

/* Start a step counted in unit (a string that outlives p) towards total (0: unknown). out NULL
 * makes p silent. Nothing is drawn until the first count. */
void mp_progress_begin(mp_progress *p, FILE *out, const char *label, const char *unit,
                       int64_t total);
/* A second count shown with its rate, in unit2 (a string that outlives p), from 0. */
void mp_progress_count2(mp_progress *p, const char *unit2);
/* End this step's line and start the next step's on the same stream (a library's second pass). */
void mp_progress_next(mp_progress *p, const char *label, const char *unit, int64_t total);
/* The total, once known (a file's size after it is opened). */
void mp_progress_set_total(mp_progress *p, int64_t total);
/* Text shown after the rate (printf-style), e.g. a second count; "" clears it. */
void mp_progress_detail(mp_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Draw if it is time (the slow path of mp_progress_set). */
void mp_progress_poll(mp_progress *p);
/* The final line (what was done, in how long, at what rate); p is silent afterwards. */
void mp_progress_end(mp_progress *p);

static inline void mp_progress_set(mp_progress *p, int64_t done)
{
    if (p && p->out) {
        p->done = done;
        if (done >= p->next_check)
            mp_progress_poll(p);
    }
}

static inline void mp_progress_add(mp_progress *p, int64_t n)
{
    if (p && p->out)
        mp_progress_set(p, p->done + n);
}

/* The second count; drawn with the next line (it never reads the clock itself). */
static inline void mp_progress_add2(mp_progress *p, int64_t n)
{
    if (p && p->out)
        p->done2 += n;
}

#endif
