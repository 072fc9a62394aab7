/* tests/unit/test_progress.c — the shared progress line (base/progress.h): what a log gets
 * (only the final line within 10 s, with counts, percentage and no ETA once done), sizes in
 * MiB/GiB, silence without a stream, and the modes' choice of stream. Nothing here depends on
 * how fast the machine is: only the text that does not contain a rate or a time is compared. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/progress.h"

/* What was written to f, as one string (the caller frees it). */
static char *contents(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    cr_assert(n >= 0);
    char *s = calloc((size_t)n + 1, 1);
    rewind(f);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    return s;
}

static bool starts(const char *s, const char *prefix)
{
    return !strncmp(s, prefix, strlen(prefix));
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

Test(progress, a_log_gets_the_final_line_with_counts)
{
    FILE *f = tmpfile();
    mp_progress p;
    mp_progress_begin(&p, f, "import", "records", 1000);
    for (int i = 1; i <= 1000; i++)
        mp_progress_add(&p, 1);
    mp_progress_detail(&p, "%d requests", 7);
    mp_progress_end(&p);
    char *s = contents(f);
    cr_assert_eq(count_lines(s), 1, "a log gets no line before 10 s, then the final one: %s", s);
    cr_assert(starts(s, "import: 1000/1000 records (100.0 %), "), "%s", s);
    cr_assert(strstr(s, " records/s, 7 requests, ") && strstr(s, " elapsed\n"), "%s", s);
    cr_assert(!strstr(s, "ETA"), "no ETA once done: %s", s);
    cr_assert(!strchr(s, '\r'), "a log is not redrawn: %s", s);
    /* ended: silent afterwards */
    mp_progress_add(&p, 5);
    mp_progress_end(&p);
    char *t = contents(f);
    cr_assert_str_eq(t, s);
    free(s), free(t);
    fclose(f);
}

Test(progress, unknown_total_and_bytes)
{
    FILE *f = tmpfile();
    mp_progress p;
    mp_progress_begin(&p, f, "scan", "steps", 0);
    mp_progress_set(&p, 42);
    mp_progress_end(&p);
    mp_progress_begin(&p, f, "sha256", MP_PROGRESS_BYTES, 0);
    mp_progress_set_total(&p, INT64_C(3) << 30);
    mp_progress_set(&p, INT64_C(3) << 29);
    mp_progress_end(&p);
    char *s = contents(f);
    cr_assert(starts(s, "scan: 42 steps, "), "no total: no percentage: %s", s);
    const char *second = strchr(s, '\n') + 1;
    cr_assert(starts(second, "sha256: 1.50/3.00 GiB (50.0 %), "), "%s", second);
    cr_assert(strstr(second, " MiB/s, ") && strstr(second, ", ETA "), "%s", second);
    free(s);
    fclose(f);
}

/* A second count with its rate; a library's second pass on the same stream; a step that cannot be
 * counted shows its detail and elapsed time only. */
Test(progress, second_count_next_step_and_uncounted_steps)
{
    FILE *f = tmpfile();
    mp_progress p;
    mp_progress_begin(&p, f, "import: check", MP_PROGRESS_BYTES, 4 << 20);
    mp_progress_count2(&p, "records");
    mp_progress_add2(&p, 3);
    mp_progress_set(&p, 4 << 20);
    mp_progress_next(&p, "import: write", "records", 3);
    mp_progress_add(&p, 3);
    mp_progress_next(&p, "index", NULL, 0);
    mp_progress_detail(&p, "sorting");
    mp_progress_end(&p);
    char *s = contents(f);
    cr_assert_eq(count_lines(s), 3, "%s", s);
    cr_assert(starts(s, "import: check: 4.0/4.0 MiB (100.0 %), "), "%s", s);
    cr_assert(strstr(s, " MiB/s, 3 records (") && strstr(s, " records/s), "), "%s", s);
    const char *second = strchr(s, '\n') + 1, *third = strchr(second, '\n') + 1;
    cr_assert(starts(second, "import: write: 3/3 records (100.0 %), "), "%s", second);
    cr_assert(!strstr(second, "MiB"), "the next step starts afresh: %s", second);
    cr_assert(starts(third, "index: sorting, ") && strstr(third, " elapsed\n"), "%s", third);
    free(s);
    fclose(f);
}

Test(progress, silent_without_a_stream)
{
    mp_progress p;
    mp_progress_begin(&p, NULL, "x", "rows", 10);
    mp_progress_add(&p, 3);
    mp_progress_poll(&p);
    mp_progress_end(&p);
    cr_assert_eq(p.done, 0, "a silent progress counts nothing");
    mp_progress_add(NULL, 1); /* library code may be handed none */
    mp_progress_set(NULL, 1);
    mp_progress_end(NULL);
}

Test(progress, modes_choose_the_stream)
{
    cr_assert_eq(mp_progress_stream(MP_PROGRESS_ON), stderr);
    cr_assert_null(mp_progress_stream(MP_PROGRESS_OFF));
    cr_assert_eq(mp_progress_stream(MP_PROGRESS_AUTO), isatty(STDERR_FILENO) ? stderr : NULL);
}
