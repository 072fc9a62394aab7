/* tests/fuzz/fuzz_knobs.c — libFuzzer target for the knob readers (base/knobs.h) and MP_AMX_ROWS'
 * check against the kernels (runtime/knobs_apply.h). The input is NAME=VALUE lines, as an
 * environment would give them.
 * Property: each line is taken or refused. Refused: a non-empty one-line message and the knobs as
 * they were. Taken: the knob's text as printed sets the same knobs again (a list's pairs read back
 * one by one, as many as mp_knob_value counts); a list MP_AMX_ROWS takes passes the kernels' check
 * or fails it in one line; every value fits MP_KNOB_TEXT_MAX. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/knobs.h"
#include "runtime/knobs_apply.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one_line(const mp_error *err)
{
    if (!err->msg[0] || strchr(err->msg, '\n'))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    mp_knobs k;
    mp_knobs_defaults(&k);
    for (char *line = text, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        const char *name = line, *value = eq + 1;
        mp_knobs before = k;
        mp_error err = {0};
        if (mp_knobs_set(&k, name, value, MP_KNOB_ENV, &err) != MP_OK) {
            one_line(&err);
            if (memcmp(&k, &before, sizeof k))
                abort();
            continue;
        }
        const int i = mp_knob_index(name);
        char shown[MP_KNOB_TEXT_MAX];
        mp_knob_value_text(&k, i, shown, sizeof shown);
        mp_knobs again = k;
        if (mp_knobs_set(&again, name, shown, MP_KNOB_ENV, &err) != MP_OK ||
            mp_knob_value(&again, i) != mp_knob_value(&k, i))
            abort();
        if (mp_knob_at(i)->type == MP_KNOB_LIST) {
            char pair[32];
            int64_t n;
            int64_t pairs = 0;
            while (mp_knob_list_at(shown, (int)pairs, pair, sizeof pair, &n))
                pairs++;
            if (pairs != mp_knob_value(&k, i) || (pairs == 0) != (shown[0] == '\0'))
                abort();
            if (!strcmp(name, "MP_AMX_ROWS") && mp_knobs_check_amx_rows(shown, &err) != MP_OK)
                one_line(&err);
        }
    }
    free(text);
    return 0;
}
