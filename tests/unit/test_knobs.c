/* tests/unit/test_knobs.c — the knob table (base/knobs.h): every type parses, each entry sets
 * its own field, values that are not allowed are refused in one line naming the variable, the
 * value and what was expected; `moeplan config` lists every knob (text, JSON) and docs/config.md
 * holds its --doc table; a bad value stops any command before it runs; no library file but
 * base/knobs.c reads the environment. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant.h"
#include "base/knobs.h"
#include "runtime/knobs_apply.h"
#include "tests/unit/cli_util.h"

static char tmpdir[256];

static void setup(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mp_test_knobs_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    for (int i = 0; i < mp_knob_count(); i++) /* the tests' commands see only the knobs they set */
        unsetenv(mp_knob_at(i)->name);
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(knobs, .init = setup, .fini = teardown);

static int index_of(const char *name)
{
    for (int i = 0; i < mp_knob_count(); i++)
        if (!strcmp(mp_knob_at(i)->name, name))
            return i;
    cr_assert_fail("no knob %s in the table", name);
    return -1;
}

static void set_ok(mp_knobs *k, const char *name, const char *text)
{
    mp_error err = {0};
    cr_assert_eq(mp_knobs_set(k, name, text, MP_KNOB_ENV, &err), MP_OK, "%s=%s: %s", name, text, err.msg);
}

Test(knobs, table_is_well_formed)
{
    cr_assert_gt(mp_knob_count(), 0);
    cr_assert_leq(mp_knob_count(), MP_KNOBS_MAX);
    for (int i = 0; i < mp_knob_count(); i++) {
        const mp_knob_def *d = mp_knob_at(i);
        cr_assert_eq(strncmp(d->name, "MP_", 3), 0, "%s", d->name);
        cr_assert_eq(mp_knob_find(d->name), d);
        for (int j = 0; j < i; j++)
            cr_assert_str_neq(mp_knob_at(j)->name, d->name, "%s twice", d->name);
        cr_assert(d->doc && *d->doc && !strchr(d->doc, '\n'), "%s: the doc is one line", d->name);
        cr_assert_lt(d->offset, offsetof(mp_knobs, source), "%s: not a knob field", d->name);
    }
    cr_assert_null(mp_knob_find("MP_NOT_A_KNOB"));
}

/* Each type: switches "0"/"1", numbers in range and the values a knob also allows, choices by word;
 * unset and empty give the default, with source default. Every field is read back by name, so an
 * entry pointing at the wrong field fails here. */
Test(knobs, every_type_parses)
{
    mp_knobs k;
    mp_knobs_defaults(&k);
    cr_assert(k.gpu_graphs && !k.pool_pin && k.moe_pipe_units == 8 && k.gpu_gemm_min_rows == 32 &&
              k.gpu_host_experts == MP_GPU_HOST_PINNED && k.isa == MP_KNOB_ISA_BEST && k.hang_dump_s == 0 &&
              k.cuda_pdl);
    set_ok(&k, "MP_GPU_GRAPHS", "0");
    cr_assert(!k.gpu_graphs);
    cr_assert_eq(k.source[index_of("MP_GPU_GRAPHS")], MP_KNOB_ENV);
    set_ok(&k, "MP_GPU_GRAPHS", "1");
    cr_assert(k.gpu_graphs);
    set_ok(&k, "MP_GPU_GRAPHS", "0");
    set_ok(&k, "MP_GPU_GRAPHS", "");
    cr_assert(k.gpu_graphs, "empty: the default");
    cr_assert_eq(k.source[index_of("MP_GPU_GRAPHS")], MP_KNOB_DEFAULT);
    set_ok(&k, "MP_POOL_PIN", "1");
    cr_assert(k.pool_pin);
    set_ok(&k, "MP_POOL_PIN", NULL);
    cr_assert(!k.pool_pin, "unset: the default");

    const struct { const char *name, *text; int64_t want; } numbers[] = {
        {"MP_MOE_PIPE_UNITS", "1", 1}, {"MP_MOE_PIPE_UNITS", "64", 64}, {"MP_GPU_GEMM_MIN_ROWS", "32", 32}, {"MP_GPU_GEMM_MIN_ROWS", "100000", 100000},
        {"MP_HANG_DUMP_S", "0", 0}, {"MP_HANG_DUMP_S", "86400", 86400}};
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
        set_ok(&k, numbers[i].name, numbers[i].text);
        cr_assert_eq(mp_knob_value(&k, index_of(numbers[i].name)), numbers[i].want, "%s=%s", numbers[i].name,
                     numbers[i].text);
    }
    cr_assert(k.moe_pipe_units == 64 && k.gpu_gemm_min_rows == 100000 && k.hang_dump_s == 86400);

    /* a list: pairs as given, read back pair by pair; empty: no pairs, the default */
    cr_assert_str_eq(k.amx_rows, "");
    set_ok(&k, "MP_AMX_ROWS", "Q4_K:6,q6_k:16,IQ4_XS:2147483647");
    cr_assert_str_eq(k.amx_rows, "Q4_K:6,q6_k:16,IQ4_XS:2147483647");
    cr_assert_eq(mp_knob_value(&k, index_of("MP_AMX_ROWS")), 3);
    cr_assert_eq(k.source[index_of("MP_AMX_ROWS")], MP_KNOB_ENV);
    const struct { const char *name; int64_t n; } pairs[] = {{"Q4_K", 6}, {"q6_k", 16}, {"IQ4_XS", 2147483647}};
    for (int i = 0; i < 3; i++) {
        char name[16];
        int64_t n = 0;
        cr_assert(mp_knob_list_at(k.amx_rows, i, name, sizeof name, &n), "pair %d", i);
        cr_assert(!strcmp(name, pairs[i].name) && n == pairs[i].n, "pair %d: %s:%lld", i, name, (long long)n);
    }
    char name[16];
    int64_t n;
    cr_assert_not(mp_knob_list_at(k.amx_rows, 3, name, sizeof name, &n), "past the last pair");
    set_ok(&k, "MP_AMX_ROWS", "");
    cr_assert_str_eq(k.amx_rows, "");
    cr_assert_eq(k.source[index_of("MP_AMX_ROWS")], MP_KNOB_DEFAULT);

    set_ok(&k, "MP_GPU_HOST_EXPERTS", "mapping");
    cr_assert_eq(k.gpu_host_experts, MP_GPU_HOST_MAPPING);
    set_ok(&k, "MP_GPU_HOST_EXPERTS", "copy");
    cr_assert_eq(k.gpu_host_experts, MP_GPU_HOST_COPY);
    set_ok(&k, "MP_ISA", "avx2");
    cr_assert_eq(k.isa, MP_KNOB_ISA_AVX2);
    cr_assert_str_eq(mp_knobs_isa_cap(&k), "avx2");
    set_ok(&k, "MP_ISA", "best");
    cr_assert_null(mp_knobs_isa_cap(&k), "best: no cap");
    char buf[64];
    cr_assert_str_eq(mp_knob_value_text(&k, index_of("MP_GPU_HOST_EXPERTS"), buf, sizeof buf), "copy");
    cr_assert_str_eq(mp_knob_value_text(&k, index_of("MP_HANG_DUMP_S"), buf, sizeof buf), "86400");
    cr_assert_str_eq(mp_knob_default_text(index_of("MP_GPU_HOST_EXPERTS"), buf, sizeof buf), "pinned");
}

/* Every entry's default, as its text, parses back to the default; and a value other than the
 * default changes that entry's field and no other one. */
Test(knobs, each_entry_sets_its_own_field)
{
    for (int i = 0; i < mp_knob_count(); i++) {
        const mp_knob_def *d = mp_knob_at(i);
        mp_knobs k;
        mp_knobs_defaults(&k);
        char text[MP_KNOB_TEXT_MAX];
        set_ok(&k, d->name, mp_knob_default_text(i, text, sizeof text));
        cr_assert_eq(mp_knob_value(&k, i), d->dflt, "%s=%s", d->name, text);
        mp_knobs dflt;
        mp_knobs_defaults(&dflt);
        if (d->type == MP_KNOB_LIST) { /* two pairs, the range's ends: its value is their count */
            char list[MP_KNOB_TEXT_MAX], back[MP_KNOB_TEXT_MAX];
            snprintf(list, sizeof list, "A_1:%lld,b2:%lld", (long long)d->lo, (long long)d->hi);
            set_ok(&k, d->name, list);
            cr_assert_eq(mp_knob_value(&k, i), 2, "%s=%s", d->name, list);
            cr_assert_str_eq(mp_knob_value_text(&k, i, back, sizeof back), list);
            for (int j = 0; j < mp_knob_count(); j++)
                if (j != i)
                    cr_assert_eq(mp_knob_value(&k, j), mp_knob_value(&dflt, j), "%s=%s changed %s", d->name, list,
                                 mp_knob_at(j)->name);
            continue;
        }
        int64_t other = d->dflt;
        switch (d->type) {
        case MP_KNOB_SWITCH: other = !d->dflt; break;
        case MP_KNOB_NUMBER: other = d->dflt == d->hi ? d->lo : d->hi; break;
        case MP_KNOB_CHOICE:
            for (int c = 0; c < d->n_choices; c++)
                if (d->choices[c].value != d->dflt)
                    other = d->choices[c].value;
            break;
        case MP_KNOB_LIST: break;
        }
        cr_assert_neq(other, d->dflt, "%s has a single allowed value", d->name);
        mp_knobs_defaults(&k);
        /* the other value through its own text, as the environment would give it */
        mp_knobs probe = k;
        char *field = (char *)&probe + d->offset;
        if (d->type == MP_KNOB_SWITCH)
            *(bool *)field = other;
        else if (d->type == MP_KNOB_NUMBER)
            *(int64_t *)field = other;
        else
            *(int *)field = (int)other;
        set_ok(&k, d->name, mp_knob_value_text(&probe, i, text, sizeof text));
        cr_assert_eq(mp_knob_value(&k, i), other, "%s=%s", d->name, text);
        for (int j = 0; j < mp_knob_count(); j++)
            if (j != i)
                cr_assert_eq(mp_knob_value(&k, j), mp_knob_value(&dflt, j), "%s=%s changed %s", d->name, text,
                             mp_knob_at(j)->name);
    }
}

/* Values that are not allowed: MP_ERR_ARG, one line "NAME=VALUE: expected ...", the knobs as they
 * were. Among them the values the variables' former readers took without a word (a gemm
 * threshold under 32 rows was raised to 32; MP_GPU_INIT_TRACE=yes read as off). */
Test(knobs, refuses_values_not_allowed_in_one_line)
{
    const struct { const char *name, *text, *msg; } bad[] = {
        {"MP_GPU_GRAPHS", "off", "MP_GPU_GRAPHS=off: expected 0 or 1"},
        {"MP_POOL_PIN", "2", "MP_POOL_PIN=2: expected 0 or 1"},
        {"MP_GPU_INIT_TRACE", "yes", "MP_GPU_INIT_TRACE=yes: expected 0 or 1"},
        {"MP_GPU_STEP_STAMPS", " 1", "MP_GPU_STEP_STAMPS= 1: expected 0 or 1"},
        {"MP_MOE_PIPE_UNITS", "0", "MP_MOE_PIPE_UNITS=0: expected a whole number in 1..64"},
        {"MP_MOE_PIPE_UNITS", "65", "MP_MOE_PIPE_UNITS=65: expected a whole number in 1..64"},
        {"MP_MOE_PIPE_UNITS", "4x", "MP_MOE_PIPE_UNITS=4x: expected a whole number in 1..64"},
        {"MP_MOE_PIPE_UNITS", "+8", "MP_MOE_PIPE_UNITS=+8: expected a whole number in 1..64"},
        {"MP_HANG_DUMP_S", "-1", "MP_HANG_DUMP_S=-1: expected 0 or a whole number in 1..86400"},
        {"MP_GPU_GEMM_MIN_ROWS", "31", "MP_GPU_GEMM_MIN_ROWS=31: expected a whole number in 32..2147483647"},
        {"MP_GPU_GEMM_MIN_ROWS", "99999999999999999999",
         "MP_GPU_GEMM_MIN_ROWS=99999999999999999999: expected a whole number in 32..2147483647"},
        {"MP_HANG_DUMP_S", "86401", "MP_HANG_DUMP_S=86401: expected 0 or a whole number in 1..86400"},
        {"MP_MOE_UNIT_MAX_KB", "16385", "MP_MOE_UNIT_MAX_KB=16385: expected a whole number in 0..16384"},
        {"MP_MOE_UNIT_MAX_KB", "128k", "MP_MOE_UNIT_MAX_KB=128k: expected a whole number in 0..16384"},
        {"MP_GPU_HOST_EXPERTS", "pinnned", "MP_GPU_HOST_EXPERTS=pinnned: expected one of pinned, copy, mapping"},
        {"MP_ISA", "avx1024", "MP_ISA=avx1024: expected one of best, scalar, avx2, avx512, amx"},
        {"MP_ISA", "AVX2", "MP_ISA=AVX2: expected one of best, scalar, avx2, avx512, amx"},
        {"MP_NOT_A_KNOB", "1", "MP_NOT_A_KNOB: no such knob (moeplan config lists them)"},
#define LIST_EXPECTED "expected TYPE:N pairs separated by commas, each TYPE once, N a whole number in 1..2147483647"
        {"MP_AMX_ROWS", "Q4_K:0", "MP_AMX_ROWS=Q4_K:0: " LIST_EXPECTED},
        {"MP_AMX_ROWS", "Q4_K:8,Q6_K", "MP_AMX_ROWS=Q4_K:8,Q6_K: 'Q6_K': " LIST_EXPECTED},
        {"MP_AMX_ROWS", "Q4_K:8,", "MP_AMX_ROWS=Q4_K:8,: '': " LIST_EXPECTED},
        {"MP_AMX_ROWS", "Q4_K:8,q4_k:9", "MP_AMX_ROWS=Q4_K:8,q4_k:9: 'q4_k:9': " LIST_EXPECTED},
        {"MP_AMX_ROWS", "Q4-K:8", "MP_AMX_ROWS=Q4-K:8: " LIST_EXPECTED},
        {"MP_AMX_ROWS", ":8", "MP_AMX_ROWS=:8: " LIST_EXPECTED},
        {"MP_AMX_ROWS", "Q4_K: 8", "MP_AMX_ROWS=Q4_K: 8: " LIST_EXPECTED},
        {"MP_AMX_ROWS", "Q4_K:8,Q6_K:2147483648", "MP_AMX_ROWS=Q4_K:8,Q6_K:2147483648: 'Q6_K:2147483648': " LIST_EXPECTED},
        {"MP_AMX_ROWS", "ABCDEFGHIJKLMNOP:8", "MP_AMX_ROWS=ABCDEFGHIJKLMNOP:8: " LIST_EXPECTED},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mp_knobs k, before;
        mp_knobs_defaults(&k);
        set_ok(&k, "MP_MOE_PIPE_UNITS", "12"); /* not the default, so that a reset would show */
        before = k;
        mp_error err = {0};
        cr_assert_eq(mp_knobs_set(&k, bad[i].name, bad[i].text, MP_KNOB_ENV, &err), MP_ERR_ARG, "%s=%s accepted",
                     bad[i].name, bad[i].text);
        cr_assert_str_eq(err.msg, bad[i].msg);
        cr_assert_eq(memcmp(&k, &before, sizeof k), 0, "%s=%s changed the knobs", bad[i].name, bad[i].text);
    }
}

typedef struct fake_env {
    const char *const (*pairs)[2];
    int n;
} fake_env;

static const char *fake_lookup(void *ctx, const char *name)
{
    const fake_env *e = ctx;
    for (int i = 0; i < e->n; i++)
        if (!strcmp(e->pairs[i][0], name))
            return e->pairs[i][1];
    return NULL;
}

/* mp_knobs_read: every knob from the lookup, sources recorded; the first bad value stops it. */
Test(knobs, read_records_sources_and_stops_at_a_bad_value)
{
    static const char *const good[][2] = {
        {"MP_GPU_GRAPHS", "0"}, {"MP_ISA", "scalar"}, {"MP_MOE_PIPE_UNITS", ""}, {"MP_OTHER", "x"}};
    fake_env env = {good, 4};
    mp_knobs k;
    mp_error err = {0};
    cr_assert_eq(mp_knobs_read(&k, fake_lookup, &env, &err), MP_OK, "%s", err.msg);
    cr_assert(!k.gpu_graphs && k.isa == MP_KNOB_ISA_SCALAR && k.moe_pipe_units == 8);
    for (int i = 0; i < mp_knob_count(); i++) {
        const char *n = mp_knob_at(i)->name;
        const bool set = !strcmp(n, "MP_GPU_GRAPHS") || !strcmp(n, "MP_ISA");
        cr_assert_eq(k.source[i], set ? MP_KNOB_ENV : MP_KNOB_DEFAULT, "%s", n);
    }
    static const char *const bad[][2] = {{"MP_GPU_GRAPHS", "0"}, {"MP_CUDA_PDL", "no"}};
    env = (fake_env){bad, 2};
    cr_assert_eq(mp_knobs_read(&k, fake_lookup, &env, &err), MP_ERR_ARG);
    cr_assert_str_eq(err.msg, "MP_CUDA_PDL=no: expected 0 or 1");
    /* a retired knob, set, stops the run (an A/B written for it would measure one arm twice);
     * empty, it is unset */
    static const char *const retired[][2] = {{"MP_CUDA_MOE_MMA2", ""}, {"MP_CUDA_MOE_DEC", "unit"}};
    env = (fake_env){retired, 1};
    cr_assert_eq(mp_knobs_read(&k, fake_lookup, &env, &err), MP_OK, "%s", err.msg);
    env = (fake_env){retired, 2};
    cr_assert_eq(mp_knobs_read(&k, fake_lookup, &env, &err), MP_ERR_ARG);
    cr_assert_str_eq(err.msg, "MP_CUDA_MOE_DEC=unit: no longer a knob: decode experts run the pair kernels for "
                              "Q4_K gate/up and Q6_K down (docs/config.md, \"Retired knobs\")");
}

/* The JSON the trace's run config and bench's rows carry: every knob, typed, and the ones not at
 * their default's source with where they came from. */
Test(knobs, json_carries_every_knob)
{
    mp_knobs k;
    mp_knobs_defaults(&k);
    set_ok(&k, "MP_MOE_PIPE_UNITS", "3");
    mp_error err = {0};
    cr_assert_eq(mp_knobs_set(&k, "MP_ISA", "scalar", MP_KNOB_FLAG, &err), MP_OK);
    cJSON *o = cJSON_CreateObject();
    cr_assert(mp_knobs_add_json(&k, o));
    const cJSON *values = cJSON_GetObjectItemCaseSensitive(o, "knobs");
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(o, "knobs_set");
    cr_assert_eq(cJSON_GetArraySize(values), mp_knob_count());
    for (int i = 0; i < mp_knob_count(); i++) {
        const mp_knob_def *d = mp_knob_at(i);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(values, d->name);
        cr_assert_not_null(v, "%s missing", d->name);
        if (d->type == MP_KNOB_CHOICE || d->type == MP_KNOB_LIST) {
            char text[MP_KNOB_TEXT_MAX];
            cr_assert(cJSON_IsString(v), "%s", d->name);
            cr_assert_str_eq(v->valuestring, mp_knob_value_text(&k, i, text, sizeof text));
        } else {
            cr_assert(cJSON_IsNumber(v), "%s", d->name);
            cr_assert_eq((int64_t)v->valuedouble, mp_knob_value(&k, i), "%s", d->name);
        }
    }
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(values, "MP_MOE_PIPE_UNITS")->valuedouble, 3);
    cr_assert_eq(cJSON_GetArraySize(set), 2);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(set, "MP_MOE_PIPE_UNITS")->valuestring, "env");
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(set, "MP_ISA")->valuestring, "flag");
    cJSON_Delete(o);
}

Test(knobs, apply_sets_the_isa_cap)
{
    mp_knobs k;
    mp_knobs_defaults(&k);
    mp_knobs_apply_kernels(&k);
    const char *best = mp_kernels_isa();
    set_ok(&k, "MP_ISA", "scalar");
    mp_knobs_apply_kernels(&k);
    cr_assert_str_eq(mp_kernels_isa(), "scalar");
    mp_knobs_defaults(&k);
    mp_knobs_apply_kernels(&k);
    cr_assert_str_eq(mp_kernels_isa(), best);
}

/* MP_PREFETCH_BYTES reaches the kernels: whole lines, capped, 0 for none, the default back */
Test(knobs, apply_sets_the_prefetch_distance)
{
    mp_knobs k;
    mp_knobs_defaults(&k);
    mp_knobs_apply_kernels(&k);
    cr_assert_eq(mp_kernels_prefetch_bytes(), MP_KNOB_PREFETCH_BYTES);
    const struct {
        const char *text;
        int64_t now;
    } cases[] = {{"0", 0}, {"100", 64}, {"4096", 4096}, {"65536", 65536}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        set_ok(&k, "MP_PREFETCH_BYTES", cases[i].text);
        mp_knobs_apply_kernels(&k);
        cr_assert_eq(mp_kernels_prefetch_bytes(), cases[i].now, "MP_PREFETCH_BYTES=%s: %lld", cases[i].text,
                     (long long)mp_kernels_prefetch_bytes());
    }
    mp_error err = {0};
    cr_assert_neq(mp_knobs_set(&k, "MP_PREFETCH_BYTES", "65600", MP_KNOB_ENV, &err), MP_OK);
    mp_kernels_set_prefetch_bytes(-5);
    cr_assert_eq(mp_kernels_prefetch_bytes(), 0);
    mp_kernels_set_prefetch_bytes(1 << 20);
    cr_assert_eq(mp_kernels_prefetch_bytes(), MP_PREFETCH_BYTES_MAX);
    mp_knobs_defaults(&k);
    mp_knobs_apply_kernels(&k);
    cr_assert_eq(mp_kernels_prefetch_bytes(), MP_KNOB_PREFETCH_BYTES);
}

/* A cost file's value of a tuned knob is taken only where the knob is at its default, and only for a
 * tuned knob; it is then marked calibrated. A value the tuned knob refuses is an error, k unchanged;
 * any value of a knob the run keeps is not looked at. */
static bool take(mp_knobs *k, const char *name, const char *text)
{
    bool taken = true;
    mp_error err = {0};
    cr_assert_eq(mp_knobs_take_calibrated(k, name, text, &taken, &err), MP_OK, "%s=%s: %s", name,
                 text ? text : "(null)", err.msg);
    return taken;
}

Test(knobs, take_calibrated_only_over_a_default)
{
    int tuned = 0;
    for (int i = 0; i < mp_knob_count(); i++)
        tuned += mp_knob_at(i)->costs == MP_KNOB_COSTS_TUNED;
    cr_assert_geq(tuned, 1, "no knob is tuned by calibrate");
    const int at = mp_knob_index("MP_PREFETCH_BYTES");
    cr_assert_eq(mp_knob_at(at)->costs, MP_KNOB_COSTS_TUNED);
    mp_knobs k;
    mp_knobs_defaults(&k);
    cr_assert(take(&k, "MP_PREFETCH_BYTES", "8192"));
    cr_assert_eq(k.prefetch_bytes, 8192);
    cr_assert_eq(k.source[at], MP_KNOB_CALIBRATED);
    cr_assert_str_eq(mp_knob_source_name(MP_KNOB_CALIBRATED), "calibrated");
    /* taken once: a second file's value does not replace it, nor the environment's, and a value
     * the knob would refuse is not looked at there */
    cr_assert_not(take(&k, "MP_PREFETCH_BYTES", "0"));
    cr_assert_not(take(&k, "MP_PREFETCH_BYTES", "8k"));
    cr_assert_eq(k.prefetch_bytes, 8192);
    mp_knobs_defaults(&k);
    set_ok(&k, "MP_PREFETCH_BYTES", "1024");
    cr_assert_not(take(&k, "MP_PREFETCH_BYTES", "8192"));
    cr_assert_not(take(&k, "MP_PREFETCH_BYTES", "8k"));
    cr_assert_eq(k.prefetch_bytes, 1024);
    cr_assert_eq(k.source[at], MP_KNOB_ENV);
    /* values the knob refuses, none among them: an error naming the knob, k unchanged */
    mp_knobs_defaults(&k);
    const char *const bad[] = {"65600", "+8", "8k", "", "-1", NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bool taken = true;
        mp_error err = {0};
        cr_assert_neq(mp_knobs_take_calibrated(&k, "MP_PREFETCH_BYTES", bad[i], &taken, &err), MP_OK, "%s",
                      bad[i] ? bad[i] : "(null)");
        cr_assert_not(taken);
        cr_assert(strstr(err.msg, "MP_PREFETCH_BYTES") && strstr(err.msg, "expected"), "%s", err.msg);
        cr_assert_eq(k.prefetch_bytes, MP_KNOB_PREFETCH_BYTES);
        cr_assert_eq(k.source[at], MP_KNOB_DEFAULT);
    }
    /* knobs calibrate does not choose, names that are none: kept, whatever the value */
    cr_assert_not(take(&k, "MP_POOL_PIN", "1"));
    cr_assert_not(take(&k, "MP_POOL_PIN", "maybe"));
    cr_assert_not(k.pool_pin);
    cr_assert_not(take(&k, "MP_NO_SUCH_KNOB", "1"));
}

/* `moeplan config`: a header and one line per knob, in table order, with the environment's value
 * and source; --json the same as objects; an unknown argument exits 2. */
Test(knobs, config_lists_every_knob)
{
    char err[4096];
    cr_assert_eq(setenv("MP_MOE_PIPE_UNITS", "12", 1), 0);
    int rc = mp_test_moeplan(tmpdir, "config", MP_TEST_STDERR, err, sizeof err);
    char *out = mp_test_stdout(tmpdir);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert_str_eq(err, "");
    const char *line = out;
    cr_assert_eq(strncmp(line, "knob ", 5), 0, "%s", out);
    line = strchr(line, '\n') + 1;
    for (int i = 0; i < mp_knob_count(); i++) {
        const mp_knob_def *d = mp_knob_at(i);
        const size_t n = strlen(d->name);
        cr_assert(!strncmp(line, d->name, n) && line[n] == ' ', "line %d is not %s: %.80s", i + 1, d->name, line);
        const char *end = strchr(line, '\n');
        cr_assert_not_null(end);
        char text[1024];
        snprintf(text, sizeof text, "%.*s", (int)(end - line), line);
        cr_assert_not_null(strstr(text, d->doc), "%s: no doc line in '%s'", d->name, text);
        char dflt[64], want[160];
        const bool env = !strcmp(d->name, "MP_MOE_PIPE_UNITS");
        mp_knob_default_text(i, dflt, sizeof dflt);
        snprintf(want, sizeof want, " %-8s %-8s %-7s ", env ? "12" : dflt, dflt, env ? "env" : "default");
        cr_assert_not_null(strstr(text, want), "%s: '%s' lacks '%s'", d->name, text, want);
        line = end + 1;
    }
    cr_assert_eq(*line, '\0', "lines after the last knob: %s", line);
    free(out);

    rc = mp_test_moeplan(tmpdir, "config --json", MP_TEST_STDERR, err, sizeof err);
    out = mp_test_stdout(tmpdir);
    cr_assert_eq(rc, 0, "%s", err);
    cJSON *root = cJSON_Parse(out);
    cr_assert_not_null(root, "%s", out);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "knobs");
    cr_assert_eq(cJSON_GetArraySize(arr), mp_knob_count());
    for (int i = 0; i < mp_knob_count(); i++) {
        const cJSON *o = cJSON_GetArrayItem(arr, i);
        cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "name")->valuestring, mp_knob_at(i)->name);
        cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "doc")->valuestring, mp_knob_at(i)->doc);
        const bool env = !strcmp(mp_knob_at(i)->name, "MP_MOE_PIPE_UNITS");
        cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "source")->valuestring, env ? "env" : "default");
        if (env)
            cr_assert_eq(cJSON_GetObjectItemCaseSensitive(o, "value")->valuedouble, 12);
    }
    cJSON_Delete(root);
    free(out);
    unsetenv("MP_MOE_PIPE_UNITS");
    cr_assert_eq(mp_test_moeplan(tmpdir, "config --yaml", MP_TEST_STDERR, err, sizeof err), 2);
    cr_assert_not_null(strstr(err, "unknown option '--yaml'"), "%s", err);
    cr_assert_eq(mp_test_moeplan(tmpdir, "config --help", MP_TEST_STDERR, err, sizeof err), 0);
}

/* docs/config.md holds `moeplan config --doc` verbatim: the page and the table cannot drift apart
 * (regenerate the page's table with that command when this fails). */
Test(knobs, docs_hold_the_table)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root, "MP_SOURCE_ROOT is not set (run through meson test)");
    char err[1024], path[4096];
    cr_assert_eq(mp_test_moeplan(tmpdir, "config --doc", MP_TEST_STDERR, err, sizeof err), 0, "%s", err);
    char *table = mp_test_stdout(tmpdir);
    for (int i = 0; i < mp_knob_count(); i++)
        cr_assert_not_null(strstr(table, mp_knob_at(i)->name), "--doc lacks %s", mp_knob_at(i)->name);
    snprintf(path, sizeof path, "%s/docs/config.md", root);
    char *page = mp_test_slurp(path);
    cr_assert_not_null(strstr(page, table), "docs/config.md does not hold `moeplan config --doc`'s table; "
                       "regenerate it:\n%s", table);
    free(page);
    free(table);
}

/* A bad value stops every command before it runs: exit 2, one line on stderr, nothing on stdout. */
Test(knobs, a_bad_value_stops_any_command)
{
    const char *cmds[] = {"config", "inspect --help", "simulate --help"};
    cr_assert_eq(setenv("MP_GPU_HOST_EXPERTS", "pinnned", 1), 0);
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char err[1024];
        cr_assert_eq(mp_test_moeplan(tmpdir, cmds[i], MP_TEST_STDERR, err, sizeof err), 2, "%s", cmds[i]);
        cr_assert_str_eq(err, "moeplan: MP_GPU_HOST_EXPERTS=pinnned: expected one of pinned, copy, mapping\n");
        char *out = mp_test_stdout(tmpdir);
        cr_assert_str_eq(out, "", "%s printed: %s", cmds[i], out);
        free(out);
    }
    unsetenv("MP_GPU_HOST_EXPERTS");
    /* a list whose names the kernels do not take: every command refuses it too, naming the pair */
    const struct { const char *text, *msg; } amx[] = {
        {"Q4_K:6,Q3_K:4", "moeplan: MP_AMX_ROWS=Q4_K:6,Q3_K:4: Q3_K has no AMX tile GEMM (the types with one: "},
        {"Q4_K:6,Q4_Z:4", "moeplan: MP_AMX_ROWS=Q4_K:6,Q4_Z:4: Q4_Z is not a weight type (the types with one: "}};
    for (size_t i = 0; i < sizeof amx / sizeof amx[0]; i++) {
        char err[1024];
        cr_assert_eq(setenv("MP_AMX_ROWS", amx[i].text, 1), 0);
        cr_assert_eq(mp_test_moeplan(tmpdir, "config", MP_TEST_STDERR, err, sizeof err), 2, "%s", amx[i].text);
        cr_assert_eq(strncmp(err, amx[i].msg, strlen(amx[i].msg)), 0, "%s", err);
        cr_assert(strstr(err, "Q4_K") && strstr(err, "Q6_K") && strstr(err, "MXFP4") && !strchr(err, '\n')[1],
                  "%s", err);
    }
    unsetenv("MP_AMX_ROWS");
}

/* MP_AMX_ROWS reaches the kernels: its types at its rows, every other type at the table's, all of
 * them back at the table's with the default; a type without a tile GEMM is refused, nothing set */
Test(knobs, apply_sets_the_amx_rows)
{
    const int q4k = mp_type_from_name("Q4_K"), q6k = mp_type_from_name("Q6_K"), q5k = mp_type_from_name("Q5_K");
    const int t4 = mp_kernels_amx_rows(q4k, true), t6 = mp_kernels_amx_rows(q6k, true),
              t5 = mp_kernels_amx_rows(q5k, true);
    cr_assert(t4 >= 1 && t6 >= 1 && t5 >= 1, "the table: %d %d %d", t4, t6, t5);
    mp_knobs k;
    mp_knobs_defaults(&k);
    set_ok(&k, "MP_AMX_ROWS", "q4_k:3,Q6_K:40");
    mp_error err = {0};
    cr_assert_eq(mp_knobs_check_amx_rows(k.amx_rows, &err), MP_OK, "%s", err.msg);
    mp_knobs_apply_kernels(&k);
    cr_assert_eq(mp_kernels_amx_rows(q4k, false), 3);
    cr_assert_eq(mp_kernels_amx_rows(q6k, false), 40);
    cr_assert_eq(mp_kernels_amx_rows(q5k, false), t5);
    cr_assert_eq(mp_kernels_amx_rows(q4k, true), t4, "the table's own value stays");
    if (!strcmp(mp_kernels_isa(), "amx")) /* the dispatched table is the one set */
        cr_assert_eq(mp_type_ops_get(q6k)->gemm_min_rows, 40);
    set_ok(&k, "MP_AMX_ROWS", "Q6_K:7");
    mp_knobs_apply_kernels(&k);
    cr_assert(mp_kernels_amx_rows(q4k, false) == t4 && mp_kernels_amx_rows(q6k, false) == 7,
              "a type the list leaves out is back at the table's");
    mp_knobs_defaults(&k);
    mp_knobs_apply_kernels(&k);
    cr_assert(mp_kernels_amx_rows(q4k, false) == t4 && mp_kernels_amx_rows(q6k, false) == t6);
    cr_assert_eq(mp_kernels_set_amx_rows(mp_type_from_name("Q2_K"), 4), -1, "Q2_K has no tile GEMM");
    cr_assert_eq(mp_kernels_amx_rows(mp_type_from_name("Q2_K"), false), -1);
    cr_assert_eq(mp_knobs_check_amx_rows("Q6_K:7,Q2_K:4", &err), MP_ERR_ARG);
    cr_assert_eq(strncmp(err.msg, "MP_AMX_ROWS=Q6_K:7,Q2_K:4: Q2_K has no AMX tile GEMM", 52), 0, "%s", err.msg);
}

/* MP_AMX_ROWS's doc line states the table's rows ("crossovers: Q4_K/Q5_K/Q8_0 8, Q6_K 12, ..."): each
 * type it names at dispatch.c's rows, and every type with a tile GEMM named once */
Test(knobs, amx_rows_doc_states_the_table)
{
    if (mp_kernels_amx_rows(mp_type_from_name("Q4_K"), true) < 0)
        cr_skip_test("this build's CPU family has no AMX tile GEMMs: no table to compare");
    const char *doc = mp_knob_find("MP_AMX_ROWS")->doc, *at = strstr(doc, "crossovers: ");
    cr_assert_not_null(at, "%s", doc);
    at += strlen("crossovers: ");
    const char *end = strchr(at, ')');
    cr_assert_not_null(end);
    int named[64] = {0};
    while (at < end) {
        const char *sp = memchr(at, ' ', (size_t)(end - at)), *comma = memchr(at, ',', (size_t)(end - at));
        cr_assert(sp && (!comma || sp < comma), "%.*s: expected TYPE[/TYPE...] N", (int)(end - at), at);
        const int rows = atoi(sp + 1);
        for (const char *t = at; t < sp;) {
            const char *slash = memchr(t, '/', (size_t)(sp - t)), *te = slash ? slash : sp;
            char name[16] = {0};
            cr_assert_lt(te - t, (long)sizeof name);
            memcpy(name, t, (size_t)(te - t));
            const int type = mp_type_from_name(name);
            cr_assert(type >= 0 && type < 64, "%s: not a type", name);
            cr_assert_eq(mp_kernels_amx_rows(type, true), rows, "the doc gives %s %d rows, the table %d", name, rows,
                         mp_kernels_amx_rows(type, true));
            named[type]++;
            t = te + (slash != NULL);
        }
        at = comma ? comma + 2 : end;
    }
    for (int i = 0, t; (t = mp_weight_type_at(i)) >= 0; i++)
        cr_assert_eq(named[t], mp_kernels_amx_rows(t, true) > 0 ? 1 : 0, "%s named %d times", mp_type_name(t), named[t]);
}

/* The knob table is the only reader of the environment in the library and the programs (tests
 * read their own variables): a getenv call anywhere else would be a knob outside the table. */
Test(knobs, no_other_library_code_reads_the_environment)
{
    const char *root = getenv("MP_SOURCE_ROOT");
    cr_assert_not_null(root, "MP_SOURCE_ROOT is not set (run through meson test)");
    char cmd[4200];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && git ls-files -- . ':!tests' 2>/dev/null | "
             "grep -E '\\.(c|h|cu|cuh)$' | xargs -r grep -ln 'getenv' --", root);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char found[4096] = "";
    size_t n = fread(found, 1, sizeof found - 1, p);
    found[n] = 0;
    pclose(p);
    char listed[4200];
    snprintf(listed, sizeof listed, "cd '%s' && git ls-files -- base/knobs.c", root);
    p = popen(listed, "r");
    cr_assert_not_null(p);
    char self[256] = "";
    n = fread(self, 1, sizeof self - 1, p);
    self[n] = 0;
    pclose(p);
    if (!*self)
        cr_skip_test("not a git checkout: the sources cannot be listed");
    cr_assert_str_eq(found, "base/knobs.c\n", "getenv outside the knob table:\n%s", found);
}
