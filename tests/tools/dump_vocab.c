/* tests/tools/dump_vocab.c — print a vocabulary learned by mp_vocab_build as JSON, so that the
 * parity fixture generator (tests/fixtures/gen_tokenizer_fixture.py) can build the reference
 * tokenizer from exactly our tokens and merges.
 * Usage: dump_vocab PRE N_VOCAB [CORPUS_FILE] > vocab.json (default corpus when no file).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "tokenizer/tokenizer.h"

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: dump_vocab PRE N_VOCAB [CORPUS_FILE]\n");
        return 2;
    }
    size_t len;
    char *owned = NULL;
    const char *corpus;
    if (argc == 4) {
        if (!(owned = read_file(argv[3], &len))) {
            fprintf(stderr, "dump_vocab: error: cannot read %s\n", argv[3]);
            return 1;
        }
        corpus = owned;
    } else {
        corpus = mp_vocab_default_corpus(&len);
    }
    mp_vocab v;
    mp_error err;
    if (mp_vocab_build(corpus, len, atoll(argv[2]), argv[1], &v, &err) != MP_OK) {
        fprintf(stderr, "dump_vocab: error: %s\n", err.msg);
        free(owned);
        return 1;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "pre", argv[1]);
    cJSON *tokens = cJSON_AddArrayToObject(root, "tokens");
    cJSON *types = cJSON_AddArrayToObject(root, "types");
    cJSON *merges = cJSON_AddArrayToObject(root, "merges");
    for (int64_t i = 0; i < v.n_vocab; i++) {
        cJSON_AddItemToArray(tokens, cJSON_CreateString(v.tokens[i]));
        cJSON_AddItemToArray(types, cJSON_CreateNumber(v.types[i]));
    }
    for (int64_t i = 0; i < v.n_merges; i++)
        cJSON_AddItemToArray(merges, cJSON_CreateString(v.merges[i]));
    cJSON_AddNumberToObject(root, "bos_id", v.bos_id);
    cJSON_AddNumberToObject(root, "eos_id", v.eos_id);
    cJSON_AddNumberToObject(root, "eot_id", v.eot_id);
    char *s = cJSON_PrintUnformatted(root);
    puts(s);
    free(s);
    cJSON_Delete(root);
    mp_vocab_free(&v);
    free(owned);
    return 0;
}
