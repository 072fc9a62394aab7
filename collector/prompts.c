/* collector/prompts.c — prompt file parsing (see prompts.h). Invariant: on error *out is empty
 * (everything parsed so far is freed). */
#include "collector/prompts.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/bytelevel.h"
#include "base/input_file.h"
#include "base/json.h"

static void where_of(const char *data, size_t n, const char *at, int64_t *line, int64_t *col)
{
    *line = 1;
    *col = 1;
    for (const char *p = data; p < at && p < data + n; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

static mp_status add(mp_prompt_set *s, size_t *cap, const cJSON *e, const char *name,
                     const char *where, mp_error *err)
{
    const cJSON *text = e, *id = NULL, *maxt = NULL;
    if (cJSON_IsObject(e)) {
        text = NULL;
        const cJSON *k;
        cJSON_ArrayForEach(k, e)
        {
            if (!strcmp(k->string, "prompt"))
                text = k;
            else if (!strcmp(k->string, "id"))
                id = k;
            else if (!strcmp(k->string, "max_tokens"))
                maxt = k;
            else
                return mp_fail(err, MP_ERR_FORMAT, "%s: %s: unknown key \"%.64s\" (expected "
                               "\"prompt\", \"id\", \"max_tokens\")", name, where, k->string);
        }
        if (!text)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: object without \"prompt\"", name, where);
    } else if (!cJSON_IsString(e)) {
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: expected a string or an object with "
                       "\"prompt\"", name, where);
    }
    if (!cJSON_IsString(text))
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: \"prompt\" must be a string", name, where);
    if (text->valuestring[0] == 0)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: empty prompt", name, where);
    /* checked here, where the offset is the prompt's own: the tokenizer sees the prompt inside
     * the chat template and would count the template's bytes too */
    const size_t text_len = strlen(text->valuestring);
    const size_t bad = mp_utf8_invalid_at((const uint8_t *)text->valuestring, text_len);
    if (bad < text_len)
        return mp_fail(err, MP_ERR_FORMAT, "%s: %s: \"prompt\": byte %zu of the prompt: invalid "
                       "UTF-8 (byte 0x%02x), expected UTF-8 text", name, where, bad,
                       (unsigned char)text->valuestring[bad]);
    int64_t max_tokens = -1;
    if (maxt) {
        double v = cJSON_IsNumber(maxt) ? maxt->valuedouble : -1;
        if (!cJSON_IsNumber(maxt) || !isfinite(v) || v != floor(v) || v < 1 || v > 1e9)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: \"max_tokens\" must be an integer in "
                           "1..1000000000", name, where);
        max_tokens = (int64_t)v;
    }
    char idbuf[64];
    if (id) {
        if (cJSON_IsString(id) && id->valuestring[0])
            snprintf(idbuf, sizeof idbuf, "%s", id->valuestring);
        else if (cJSON_IsNumber(id) && isfinite(id->valuedouble) &&
                 id->valuedouble == floor(id->valuedouble) && fabs(id->valuedouble) < 1e15)
            snprintf(idbuf, sizeof idbuf, "%lld", (long long)id->valuedouble);
        else
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: \"id\" must be a non-empty string or an "
                           "integer", name, where);
        if (cJSON_IsString(id) && strlen(id->valuestring) >= sizeof idbuf)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: \"id\" longer than %zu bytes", name, where,
                           sizeof idbuf - 1);
    } else {
        snprintf(idbuf, sizeof idbuf, "%lld", (long long)s->n);
    }
    for (int64_t i = 0; i < s->n; i++)
        if (!strcmp(s->items[i].id, idbuf))
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: id \"%s\" repeats prompt %lld's", name,
                           where, idbuf, (long long)i);
    if ((size_t)s->n == *cap) {
        size_t nc = *cap ? 2 * *cap : 16;
        mp_prompt *it = realloc(s->items, nc * sizeof *it);
        if (!it)
            return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", name);
        s->items = it;
        *cap = nc;
    }
    mp_prompt *p = &s->items[s->n];
    p->text = strdup(text->valuestring);
    p->id = strdup(idbuf);
    p->max_tokens = max_tokens;
    if (!p->text || !p->id) {
        free(p->text);
        free(p->id);
        return mp_fail(err, MP_ERR_NOMEM, "%s: out of memory", name);
    }
    s->n++;
    return MP_OK;
}

static mp_status parse_array(const char *name, const char *data, size_t n, mp_prompt_set *s,
                             mp_error *err)
{
    mp_json_error je;
    cJSON *root = mp_json_parse_strict(data, n, &je);
    if (!root) {
        if (je.key[0])
            return mp_fail(err, MP_ERR_FORMAT, "%s: key \"%s\" repeated in an object, expected "
                           "each key once", name, je.key);
        int64_t line, col;
        where_of(data, n, data + je.offset, &line, &col);
        return mp_fail(err, MP_ERR_FORMAT, "%s: line %lld column %lld: %s (expected a JSON array "
                       "of prompts, or JSON Lines)", name, (long long)line, (long long)col,
                       strcmp(je.what, "not valid JSON") ? "text after the JSON array" : je.what);
    }
    mp_status st = MP_OK;
    size_t cap = 0;
    int64_t i = 0;
    const cJSON *e;
    char where[48];
    cJSON_ArrayForEach(e, root)
    {
        snprintf(where, sizeof where, "element %lld", (long long)i++);
        if ((st = add(s, &cap, e, name, where, err)))
            break;
    }
    cJSON_Delete(root);
    return st;
}

static mp_status parse_lines(const char *name, const char *data, size_t n, mp_prompt_set *s,
                             mp_error *err)
{
    size_t off = 0, cap = 0;
    int64_t line_no = 0;
    char where[48];
    while (off < n) {
        const char *line = data + off;
        const char *nl = memchr(line, '\n', n - off);
        size_t len = nl ? (size_t)(nl - line) : n - off;
        off += len + (nl ? 1 : 0);
        line_no++;
        size_t a = 0;
        while (a < len && (line[a] == ' ' || line[a] == '\t' || line[a] == '\r'))
            a++;
        if (a == len)
            continue; /* blank line */
        snprintf(where, sizeof where, "line %lld", (long long)line_no);
        mp_json_error je;
        cJSON *j = mp_json_parse_strict(line, len, &je);
        if (!j && je.key[0])
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: key \"%s\" repeated, expected each key "
                           "once", name, where, je.key);
        if (!j && strcmp(je.what, "not valid JSON"))
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s column %zu: text after the JSON value, "
                           "expected one prompt per line", name, where, je.offset + 1);
        if (!j)
            return mp_fail(err, MP_ERR_FORMAT, "%s: %s: not valid JSON (expected a string or an "
                           "object with \"prompt\")", name, where);
        mp_status st = add(s, &cap, j, name, where, err);
        cJSON_Delete(j);
        if (st)
            return st;
    }
    return MP_OK;
}

mp_status mp_prompts_parse(const char *name, const char *data, size_t n, mp_prompt_set *out,
                           mp_error *err)
{
    out->items = NULL;
    out->n = 0;
    if (memchr(data, 0, n))
        return mp_fail(err, MP_ERR_FORMAT, "%s: offset %zu: NUL byte in a text file", name,
                       (size_t)((const char *)memchr(data, 0, n) - data));
    size_t a = 0;
    while (a < n && (data[a] == ' ' || data[a] == '\n' || data[a] == '\r' || data[a] == '\t'))
        a++;
    if (a == n)
        return mp_fail(err, MP_ERR_FORMAT, "%s: empty file, expected a JSON array of prompts or "
                       "JSON Lines", name);
    mp_status st = data[a] == '[' ? parse_array(name, data, n, out, err)
                                  : parse_lines(name, data, n, out, err);
    if (st == MP_OK && out->n == 0)
        st = mp_fail(err, MP_ERR_FORMAT, "%s: no prompts", name);
    if (st)
        mp_prompts_free(out);
    return st;
}

mp_status mp_prompts_load(const char *path, mp_prompt_set *out, mp_error *err)
{
    out->items = NULL;
    out->n = 0;
    char *buf;
    size_t n;
    mp_status rs = mp_input_read_all(path, "prompts", MP_PROMPTS_MAX_FILE_BYTES, &buf, &n, err);
    if (rs)
        return rs;
    mp_status st = mp_prompts_parse(path, buf ? buf : "", n, out, err);
    free(buf);
    return st;
}

void mp_prompts_free(mp_prompt_set *s)
{
    for (int64_t i = 0; i < s->n; i++) {
        free(s->items[i].text);
        free(s->items[i].id);
    }
    free(s->items);
    s->items = NULL;
    s->n = 0;
}
