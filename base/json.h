/* base/json.h — cJSON as every JSON reader and writer of moeplan uses it.
 *
 * Reading: mp_json_parse_strict accepts exactly one JSON value and nothing but whitespace after
 * it, and refuses an object that has a key twice, at any depth (cJSON keeps both members and a
 * lookup finds the first, so {"prompt":"a","prompt":"b"} would silently mean "a").
 *
 * Writing: a document built with cJSON_Add* calls loses a member silently when an allocation
 * fails (the call returns NULL and the rest goes on). cJSON's allocations are routed through a
 * counting, fault-injectable malloc (base/fault.h); a writer takes a mark before it builds and
 * refuses to write if any allocation failed since (mp_json_failed_since).
 */
#ifndef MP_BASE_JSON_H
#define MP_BASE_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

typedef struct mp_json_error {
    const char *what;  /* "not valid JSON", "text after the JSON value", "repeated key" */
    size_t offset;     /* byte offset into the text (a repeated key: 0, cJSON keeps no positions) */
    char key[64];      /* the repeated key (cut to 63 bytes), else "" */
} mp_json_error;

/* The value in text[0..len), or NULL with *e filled. */
cJSON *mp_json_parse_strict(const char *text, size_t len, mp_json_error *e);

/* cJSON_AddItemToObject / cJSON_AddItemToArray that free item when it cannot be attached (obj
 * NULL after a failed allocation, or the attach itself out of memory): cJSON leaves it to the
 * caller, and unchecked calls leaked it. Return whether it was attached. */
bool mp_json_attach(cJSON *obj, const char *key, cJSON *item);
bool mp_json_append(cJSON *arr, cJSON *item);

/* Failed cJSON allocations so far (installs the counting allocator on first use). */
typedef struct mp_json_mark {
    uint64_t failures;
} mp_json_mark;
mp_json_mark mp_json_begin(void);
bool mp_json_failed_since(mp_json_mark m);

#endif
