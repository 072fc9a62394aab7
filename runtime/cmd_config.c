/* runtime/cmd_config.c — `moeplan config [--json | --doc]`: every knob of the table
 * (base/knobs.h) with its value in this environment, its default, where the value came from
 * and its doc line; --doc prints the table docs/config.md holds (defaults only, so that the page
 * does not depend on who generated it).
 */
#include <stdio.h>
#include <string.h>

#include "base/args.h"
#include "runtime/commands.h"
#include "base/knobs.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: moeplan config [--json | --doc]\n\n"
               "Prints every MP_* environment variable (knob) moeplan reads: its value here, its\n"
               "default, where the value came from (default or env), what it allows and what it\n"
               "does. moeplan reads them once when it starts; a value that is not allowed stops\n"
               "every command with one line naming the variable, the value and what it expects.\n"
               "Traces (run.config_json) and bench's JSON rows record the values they ran with.\n"
               "Those \"in the costs\" change what calibrate times: a cost file records them, and\n"
               "a run with --costs says which of its own differ from the file's.\n\n"
               "      --json   the same as one JSON object\n"
               "      --doc    the table of docs/config.md (markdown: the defaults, not the values here)\n"
               "  -h, --help   show this help\n");
}

static void print_text(const mp_knobs *k)
{
    int width = 4;
    for (int i = 0; i < mp_knob_count(); i++) {
        const int n = (int)strlen(mp_knob_at(i)->name);
        width = n > width ? n : width;
    }
    printf("%-*s  %-8s %-8s %-7s  %s\n", width, "knob", "value", "default", "source", "allowed: what it does");
    for (int i = 0; i < mp_knob_count(); i++) {
        char value[MP_KNOB_TEXT_MAX], dflt[MP_KNOB_TEXT_MAX], allowed[160];
        printf("%-*s  %-8s %-8s %-7s  %s: %s\n", width, mp_knob_at(i)->name,
               mp_knob_value_text(k, i, value, sizeof value),
               mp_knob_default_text(i, dflt, sizeof dflt), mp_knob_source_name((mp_knob_source)k->source[i]),
               mp_knob_allowed_text(i, allowed, sizeof allowed), mp_knob_at(i)->doc);
    }
}

/* a choice or list as its text, a switch or number as a JSON number (as the trace and bench record them) */
static bool add_value(cJSON *o, const char *key, const mp_knob_def *d, int64_t v, const char *text)
{
    return (d->type == MP_KNOB_CHOICE || d->type == MP_KNOB_LIST ? cJSON_AddStringToObject(o, key, text)
                                      : cJSON_AddNumberToObject(o, key, (double)v)) != NULL;
}

static int print_json(const mp_knobs *k)
{
    static const char *const types[] = {[MP_KNOB_SWITCH] = "switch", [MP_KNOB_NUMBER] = "number",
                                        [MP_KNOB_CHOICE] = "choice", [MP_KNOB_LIST] = "list"};
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = root ? cJSON_AddArrayToObject(root, "knobs") : NULL;
    bool ok = arr != NULL;
    for (int i = 0; ok && i < mp_knob_count(); i++) {
        const mp_knob_def *d = mp_knob_at(i);
        char value[MP_KNOB_TEXT_MAX], dflt[MP_KNOB_TEXT_MAX], allowed[160];
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(arr, o);
        if (!ok) {
            cJSON_Delete(o);
            break;
        }
        ok = cJSON_AddStringToObject(o, "name", d->name) && cJSON_AddStringToObject(o, "type", types[d->type]) &&
             add_value(o, "value", d, mp_knob_value(k, i), mp_knob_value_text(k, i, value, sizeof value)) &&
             add_value(o, "default", d, d->dflt, mp_knob_default_text(i, dflt, sizeof dflt)) &&
             cJSON_AddStringToObject(o, "source", mp_knob_source_name((mp_knob_source)k->source[i])) &&
             cJSON_AddStringToObject(o, "allowed", mp_knob_allowed_text(i, allowed, sizeof allowed)) &&
             cJSON_AddBoolToObject(o, "costs", d->costs != MP_KNOB_COSTS_NONE) &&
             cJSON_AddBoolToObject(o, "calibrated", d->costs == MP_KNOB_COSTS_TUNED) &&
             cJSON_AddStringToObject(o, "doc", d->doc);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) {
        fprintf(stderr, "moeplan config: error: out of memory building the JSON output\n");
        return 1;
    }
    printf("%s\n", text);
    cJSON_free(text);
    return 0;
}

/* s with every '|' as "\|" (a markdown table cell) */
static void cell(const char *s)
{
    for (; *s; s++)
        printf(*s == '|' ? "\\|" : "%c", *s);
}

static void print_doc(void)
{
    printf("| knob | allowed | default | in the costs | what it does |\n|---|---|---|---|---|\n");
    for (int i = 0; i < mp_knob_count(); i++) {
        char dflt[MP_KNOB_TEXT_MAX], allowed[160];
        printf("| `%s` | `", mp_knob_at(i)->name);
        cell(mp_knob_allowed_text(i, allowed, sizeof allowed));
        const int costs = mp_knob_at(i)->costs;
        mp_knob_default_text(i, dflt, sizeof dflt);
        printf(dflt[0] ? "` | `%s` | %s | " : "` | %s(empty) | %s | ", dflt,
               costs == MP_KNOB_COSTS_TUNED ? "chosen by calibrate" : costs ? "yes" : "no");
        cell(mp_knob_at(i)->doc);
        printf(" |\n");
    }
}

enum { OPT_JSON = 256, OPT_DOC };

static const mp_cli_opt config_flags[] = {
    {"json", 0, false, OPT_JSON, NULL},
    {"doc", 0, false, OPT_DOC, NULL},
    {"help", 'h', false, 'h', NULL},
    {0},
};

int mp_cmd_config(int argc, char **argv, const mp_knobs *knobs)
{
    bool json = false, doc = false;
    mp_cli c;
    mp_cli_init(&c, "config", config_flags, argc, argv);
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END;) {
        switch (id) {
        case MP_CLI_ERROR:
            return mp_cli_usage_error("config", c.err.msg);
        case MP_CLI_POSITIONAL:
            fprintf(stderr, "moeplan config: error: unexpected argument '%s' (see moeplan config --help)\n", v);
            return MP_EXIT_USAGE;
        case 'h':
            usage(stdout);
            return MP_EXIT_OK;
        case OPT_JSON:
            json = true;
            break;
        case OPT_DOC:
            doc = true;
            break;
        }
    }
    if (json && doc) {
        fprintf(stderr, "moeplan config: error: --json and --doc exclude each other (see moeplan config --help)\n");
        return 2;
    }
    if (doc) {
        print_doc();
        return 0;
    }
    if (json)
        return print_json(knobs);
    print_text(knobs);
    return 0;
}
