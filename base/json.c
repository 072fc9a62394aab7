/* base/json.c — see json.h. */
#include "base/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"

static const cJSON *repeated_key(const cJSON *v)
{
    for (const cJSON *it = v ? v->child : NULL; it; it = it->next) {
        if (cJSON_IsObject(v))
            for (const cJSON *o = v->child; o != it; o = o->next)
                if (o->string && it->string && !strcmp(o->string, it->string))
                    return it;
        const cJSON *deep = repeated_key(it);
        if (deep)
            return deep;
    }
    return NULL;
}

cJSON *mp_json_parse_strict(const char *text, size_t len, mp_json_error *e)
{
    memset(e, 0, sizeof *e);
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!v) {
        const char *at = cJSON_GetErrorPtr();
        e->what = "not valid JSON";
        e->offset = at && at >= text && at <= text + len ? (size_t)(at - text) : len;
        return NULL;
    }
    for (const char *p = end; p && p < text + len; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(v);
            e->what = "text after the JSON value";
            e->offset = (size_t)(p - text);
            return NULL;
        }
    const cJSON *dup = repeated_key(v);
    if (dup) {
        e->what = "repeated key";
        snprintf(e->key, sizeof e->key, "%s", dup->string);
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

bool mp_json_attach(cJSON *obj, const char *key, cJSON *item)
{
    if (obj && item && cJSON_AddItemToObject(obj, key, item))
        return true;
    cJSON_Delete(item);
    return false;
}

bool mp_json_append(cJSON *arr, cJSON *item)
{
    if (arr && item && cJSON_AddItemToArray(arr, item))
        return true;
    cJSON_Delete(item);
    return false;
}

static uint64_t json_failures;
static bool hooks_installed;

static void *json_malloc(size_t n)
{
    void *p = mp_fault_malloc(n);
    json_failures += !p;
    return p;
}

mp_json_mark mp_json_begin(void)
{
    if (!hooks_installed) {
        cJSON_Hooks h = {.malloc_fn = json_malloc, .free_fn = free};
        cJSON_InitHooks(&h);
        hooks_installed = true;
    }
    return (mp_json_mark){json_failures};
}

bool mp_json_failed_since(mp_json_mark m)
{
    return json_failures != m.failures;
}
