/* base/args.c — the shared command-line parser (see args.h).
 *
 * getopt_long runs in RETURN_IN_ORDER mode ("-" first in the short string: an argument that is
 * not an option comes back as code 1, where it stands, so argv is never permuted) and with ":"
 * (a missing value is told apart from an unknown option). Because argv stays in order, the
 * element getopt is about to read is argv[optind] whenever it is not inside a cluster of short
 * flags; that is where the spelling of an option, its abbreviation check and the single-dash
 * words (-ngl) are read from.
 */
#include "base/args.h"

#include <stdio.h>
#include <string.h>

void mp_cli_init(mp_cli *c, const char *cmd, const mp_cli_opt *opts, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->cmd = cmd;
    c->opts = opts;
    c->argc = argc;
    c->argv = argv;
    size_t n_long = 0, s = 0;
    c->shortopts[s++] = '-';
    c->shortopts[s++] = ':';
    for (int i = 0; opts[i].name || opts[i].short_name; i++) {
        if (i == MP_CLI_MAX_OPTS)
            break; /* a table this long is a bug the command's own tests catch (its last options fail) */
        if (opts[i].name)
            c->longopts[n_long++] = (struct option){opts[i].name,
                                                    opts[i].value ? required_argument : no_argument,
                                                    NULL, 256 + i};
        if (opts[i].short_name) {
            c->shortopts[s++] = (char)opts[i].short_name;
            if (opts[i].value)
                c->shortopts[s++] = ':';
        }
    }
    c->shortopts[s] = '\0';
    c->longopts[n_long] = (struct option){0};
    optind = 0; /* glibc: 0 re-initialises the scanner */
    opterr = 0;
}

/* Edit distance of a and b (short strings: option names): insertions, deletions, substitutions
 * and swaps of two neighbouring letters, the commonest typo, each count one. */
static size_t distance(const char *a, const char *b)
{
    const size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 64;
    size_t d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

const char *mp_cli_suggest(const mp_cli_opt *opts, const char *name)
{
    const size_t len = strlen(name);
    const char *best = NULL, *prefix_of = NULL;
    size_t best_d = (size_t)-1;
    int n_prefix = 0;
    for (int i = 0; opts[i].name || opts[i].short_name; i++) {
        if (!opts[i].name)
            continue;
        if (len >= 2 && !strncmp(opts[i].name, name, len)) {
            n_prefix += !prefix_of || strcmp(prefix_of, opts[i].name);
            prefix_of = opts[i].name;
        }
        const size_t d = distance(name, opts[i].name);
        if (d < best_d)
            best_d = d, best = opts[i].name;
    }
    if (n_prefix == 1) /* an abbreviation of exactly one name */
        return prefix_of;
    /* a typo: one edit in a short name, two in a longer one */
    return best && best_d <= (len <= 4 ? 1u : 2u) ? best : NULL;
}

int mp_cli_usage_error(const char *cmd, const char *msg)
{
    fprintf(stderr, "moeplan %s: error: %s (see moeplan %s --help)\n", cmd, msg, cmd);
    return MP_EXIT_USAGE;
}

void mp_cli_note_ngl(const char *cmd, const char *value)
{
    fprintf(stderr, "moeplan %s: note: -ngl %s ignored: the GPU executor keeps every layer's "
                    "weights on the GPU; which experts stay in host memory is --placement "
                    "(--n-cpu-moe, --cpu-moe)\n", cmd, value);
}

/* The name part of a long option as written: "--ctx=8" -> "ctx" (into buf). */
static const char *long_name_of(const char *token, char *buf, size_t cap)
{
    const char *name = token + 2;
    const char *eq = strchr(name, '=');
    const size_t n = eq ? (size_t)(eq - name) : strlen(name);
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), name);
    return buf;
}

static int unknown_long(mp_cli *c, const char *name)
{
    const char *near = mp_cli_suggest(c->opts, name);
    if (near)
        mp_fail(&c->err, MP_ERR_ARG, "unknown option '--%s'; did you mean --%s?", name, near);
    else
        mp_fail(&c->err, MP_ERR_ARG, "unknown option '--%s'", name);
    return MP_CLI_ERROR;
}

static bool is_long_name(const mp_cli *c, const char *name)
{
    for (int i = 0; c->opts[i].name || c->opts[i].short_name; i++)
        if (c->opts[i].name && !strcmp(c->opts[i].name, name))
            return true;
    return false;
}

static void set_names(mp_cli *c, const mp_cli_opt *o, const char *given)
{
    if (o->name)
        snprintf(c->flag_buf, sizeof c->flag_buf, "--%s", o->name);
    else
        snprintf(c->flag_buf, sizeof c->flag_buf, "-%c", o->short_name);
    snprintf(c->given_buf, sizeof c->given_buf, "%s", given);
    c->flag = c->flag_buf;
    c->given = c->given_buf;
}

int mp_cli_next(mp_cli *c, const char **value)
{
    *value = NULL;
    if (c->options_ended) {
        if (optind < c->argc) {
            *value = c->argv[optind++];
            return MP_CLI_POSITIONAL;
        }
        return MP_CLI_END;
    }
    const int at = optind ? optind : 1;
    /* inside a cluster of short flags (-rt4) getopt has not moved past argv[at] yet */
    const bool in_cluster = c->in_cluster;
    const char *token = at < c->argc ? c->argv[at] : NULL;
    if (token && !in_cluster)
        for (int i = 0; c->opts[i].name || c->opts[i].short_name; i++) {
            const mp_cli_opt *o = &c->opts[i];
            if (!o->word || strcmp(token, o->word))
                continue;
            set_names(c, o, token);
            if (o->value) {
                if (at + 1 >= c->argc) {
                    mp_fail(&c->err, MP_ERR_ARG, "option %s needs a value", token);
                    return MP_CLI_ERROR;
                }
                *value = c->argv[at + 1];
            }
            optind = at + 1 + o->value;
            return o->id;
        }
    c->in_cluster = false;
    int longindex = -1;
    const int r = getopt_long(c->argc, c->argv, c->shortopts, c->longopts, &longindex);
    char name[64];
    if (r == -1) { /* the end, or "--" */
        c->options_ended = true;
        return mp_cli_next(c, value);
    }
    if (r == 1) {
        *value = optarg;
        return MP_CLI_POSITIONAL;
    }
    const bool long_token = token && !in_cluster && !strncmp(token, "--", 2);
    if (r == ':') {
        if (long_token && !is_long_name(c, long_name_of(token, name, sizeof name)))
            return unknown_long(c, name); /* getopt took an abbreviation */
        if (long_token)
            mp_fail(&c->err, MP_ERR_ARG, "option --%s needs a value", long_name_of(token, name, sizeof name));
        else
            mp_fail(&c->err, MP_ERR_ARG, "option -%c needs a value", optopt);
        return MP_CLI_ERROR;
    }
    if (r == '?') {
        if (!long_token) {
            mp_fail(&c->err, MP_ERR_ARG, "unknown option '-%c'", optopt);
            return MP_CLI_ERROR;
        }
        if (is_long_name(c, long_name_of(token, name, sizeof name))) { /* --flag=value */
            mp_fail(&c->err, MP_ERR_ARG, "option --%s takes no value", name);
            return MP_CLI_ERROR;
        }
        return unknown_long(c, name);
    }
    const mp_cli_opt *o = NULL;
    if (r >= 256) {
        o = &c->opts[r - 256];
        if (!long_token || strcmp(long_name_of(token, name, sizeof name), o->name))
            return unknown_long(c, long_token ? name : o->name); /* an abbreviation */
        char given[66];
        snprintf(given, sizeof given, "--%s", o->name);
        set_names(c, o, given);
    } else {
        for (int i = 0; !o && (c->opts[i].name || c->opts[i].short_name); i++)
            if (c->opts[i].short_name == r)
                o = &c->opts[i];
        if (!o) { /* cannot happen: getopt returns only the table's letters */
            mp_fail(&c->err, MP_ERR_INTERNAL, "option -%c: not in the table", r);
            return MP_CLI_ERROR;
        }
        const char given[3] = {'-', (char)r, '\0'};
        set_names(c, o, given);
        c->in_cluster = optind == at; /* more letters of argv[at] to come */
    }
    *value = o->value ? optarg : NULL;
    return o->id;
}
