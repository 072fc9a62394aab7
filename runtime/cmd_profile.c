/* runtime/cmd_profile.c — `moeplan profile inspect|verify`: read an STRP profile fail-closed and
 * say what it contains, or check it against a model's geometry. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/args.h"
#include "runtime/commands.h"
#include "gguf/gguf.h"
#include "runtime/strp.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: moeplan profile inspect PROFILE [--top N]\n"
            "       moeplan profile verify PROFILE (-m, --model MODEL.gguf | --layers N --experts M)\n\n"
            "inspect  print the header, the resident set and the whole ranking's length, the first N\n"
            "         ranked experts (default 10; past the pairs, the ranking the table gives),\n"
            "         resident experts per layer and the trailing table (kind, and for counts the\n"
            "         share of routes the resident experts serve)\n"
            "verify   read the profile fail-closed and check that its geometry is the model's:\n"
            "         -m reads <arch>.block_count and <arch>.expert_count from the GGUF; or give\n"
            "         --layers N --experts M (layers are the model's block indices). Exit 0 only if\n"
            "         the profile is valid for that model.\n\n"
            "Both say whether readers that refuse n_ranked > slots (Strata's read_expert_profile,\n"
            "the llama.cpp fork's llama_read_expert_profile) load the file.\n"
            "The format is described in schemas/strp.md.\n");
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || v > UINT32_MAX || s[0] == '-')
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* A model's STRP geometry: its block count and routed experts per layer, from GGUF metadata. */
static mp_status model_geometry(const char *path, uint32_t *layers, uint32_t *experts, mp_error *err)
{
    mp_gguf *g;
    mp_status st = mp_gguf_open(path, &g, err);
    if (st)
        return st;
    mp_str arch;
    char key[160];
    if (!(st = mp_gguf_get_str(g, "general.architecture", &arch, err))) {
        if (arch.len > 100) {
            st = mp_fail(err, MP_ERR_FORMAT, "model %s: general.architecture of %llu bytes: expected a short name",
                         path, (unsigned long long)arch.len);
        } else {
            snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.ptr);
            st = mp_gguf_get_u32(g, key, layers, err);
            if (!st) {
                snprintf(key, sizeof key, "%.*s.expert_count", (int)arch.len, arch.ptr);
                st = mp_gguf_get_u32(g, key, experts, err);
                if (st)
                    mp_error_prefix(err, "model %s is not a MoE model (no %s)", path, key);
            }
        }
    }
    mp_gguf_close(g);
    return st;
}

/* What the readers that refuse n_ranked > slots make of the file. */
static const char *others_verdict(const mp_strp *p)
{
    return p->n_ranked > p->slots ? "refused by readers that refuse n_ranked > slots (Strata, the llama.cpp fork)"
                                  : "loads in readers that refuse n_ranked > slots (Strata, the llama.cpp fork)";
}

static void print_table(const mp_strp *p)
{
    uint64_t cells = (uint64_t)p->n_layers * p->n_experts;
    printf("table:     %s\n", mp_strp_table_name(p->table));
    if (p->counts) {
        /* Routes served by the resident set (the first min(slots, n_ranked) pairs): the profile's promise. */
        uint64_t total = 0, resident = 0;
        for (uint64_t c = 0; c < cells; c++)
            total += p->counts[c];
        for (uint32_t i = 0; i < mp_strp_resident(p); i++)
            resident += p->counts[(uint64_t)p->ranked[i].layer * p->n_experts + p->ranked[i].expert];
        printf("routes:    %" PRIu64 " counted, %" PRIu64 " served by the %u resident experts (%.2f%%)\n",
               total, resident, mp_strp_resident(p), total ? 100.0 * (double)resident / (double)total : 0.0);
    }
    if (p->slot_of) {
        uint64_t n_resident = 0;
        for (uint64_t c = 0; c < cells; c++)
            n_resident += p->slot_of[c] >= 0;
        printf("slots:     %" PRIu64 " entries name a slot (int32 reading)\n", n_resident);
    }
    if (p->freq) {
        double sum = 0;
        for (uint64_t c = 0; c < cells; c++)
            sum += p->freq[c];
        printf("freq:      sum %.6g (f32 reading)\n", sum);
    }
    if (p->table == MP_STRP_TABLE_4BYTE_AMBIGUOUS)
        printf("note:      the 4-byte table is all zeros: valid as int32 slots (all slot 0) and as "
               "f32 frequencies (all 0); both readings are shown\n");
}

static int inspect(const char *path, uint32_t top)
{
    mp_strp p;
    mp_error err;
    if (mp_strp_read_file(path, NULL, &p, &err)) {
        fprintf(stderr, "moeplan profile: error: %s\n", err.msg);
        return 1;
    }
    printf("profile:   %s\n", path);
    printf("format:    STRP v%u\n", MP_STRP_VERSION);
    printf("geometry:  %u layers x %u experts\n", p.n_layers, p.n_experts);
    printf("header:    slots %u, n_ranked %u: %s\n", p.slots, p.n_ranked, others_verdict(&p));
    printf("resident:  %u (the first min(slots, n_ranked) pairs)\n", mp_strp_resident(&p));
    printf("ranking:   %u = %u pairs + %u ranked after them by the table\n", mp_strp_ranking_len(&p), p.n_ranked,
           p.n_tail);
    print_table(&p);
    uint32_t *per_layer = calloc(p.n_layers, sizeof *per_layer); // (n_layers)
    if (!per_layer) {
        fprintf(stderr, "moeplan profile: error: out of memory\n");
        mp_strp_free(&p);
        return 1;
    }
    for (uint32_t i = 0; i < mp_strp_resident(&p); i++)
        per_layer[p.ranked[i].layer]++;
    printf("resident per layer:");
    for (uint32_t l = 0; l < p.n_layers; l++)
        printf("%s%u", l ? " " : " ", per_layer[l]);
    printf("\n");
    free(per_layer);
    const uint32_t n = top < mp_strp_ranking_len(&p) ? top : mp_strp_ranking_len(&p);
    printf("top %u ranked (rank layer expert%s):\n", n, p.counts ? " count" : "");
    for (uint32_t i = 0; i < n; i++) {
        const mp_strp_pair q = mp_strp_ranked_at(&p, i);
        printf("  %5u %5u %5u", i, q.layer, q.expert);
        if (p.counts)
            printf(" %" PRIu64, p.counts[(uint64_t)q.layer * p.n_experts + q.expert]);
        printf("%s\n", i < mp_strp_resident(&p) ? ""
                        : i < p.n_ranked         ? "  (not resident)"
                                                 : "  (not resident; from the table)");
    }
    mp_strp_free(&p);
    return 0;
}

enum { OPT_TOP = 256, OPT_LAYERS, OPT_EXPERTS };

static const mp_cli_opt profile_flags[] = {
    {"top", 0, true, OPT_TOP, NULL},
    {"model", 'm', true, 'm', NULL},
    {"layers", 0, true, OPT_LAYERS, NULL},
    {"experts", 0, true, OPT_EXPERTS, NULL},
    {"help", 'h', false, 'h', NULL},
    {0},
};

int mp_cmd_profile(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1];
    const char *path = NULL;
    uint32_t top = 10, layers = 0, experts = 0;
    bool have_layers = false, have_experts = false;
    const char *model = NULL;
    mp_cli c;
    mp_cli_init(&c, "profile", profile_flags, argc - 1, argv + 1); /* after the subcommand */
    const char *v;
    for (int id; (id = mp_cli_next(&c, &v)) != MP_CLI_END;) {
        uint32_t n;
        switch (id) {
        case MP_CLI_ERROR:
            return mp_cli_usage_error("profile", c.err.msg);
        case 'h':
            usage(stdout);
            return MP_EXIT_OK;
        case 'm':
            model = v;
            break;
        case OPT_TOP:
        case OPT_LAYERS:
        case OPT_EXPERTS:
            if (parse_u32(v, &n)) {
                fprintf(stderr, "moeplan profile: error: %s '%s': expected a non-negative integer\n", c.flag, v);
                return MP_EXIT_USAGE;
            }
            if (id == OPT_TOP)
                top = n;
            else if (id == OPT_LAYERS)
                layers = n, have_layers = true;
            else
                experts = n, have_experts = true;
            break;
        case MP_CLI_POSITIONAL:
            if (path) {
                fprintf(stderr, "moeplan profile: error: unexpected argument '%s'\n", v);
                return MP_EXIT_USAGE;
            }
            path = v;
            break;
        }
    }
    if (!path) {
        fprintf(stderr, "moeplan profile: error: missing PROFILE (see moeplan profile --help)\n");
        return 2;
    }
    if (!strcmp(sub, "inspect"))
        return inspect(path, top);
    if (!strcmp(sub, "verify")) {
        if (model && (have_layers || have_experts)) {
            fprintf(stderr, "moeplan profile: error: verify takes -m MODEL or --layers/--experts, not both\n");
            return 2;
        }
        if (!model && (!have_layers || !have_experts)) {
            fprintf(stderr, "moeplan profile: error: verify needs -m MODEL or --layers N --experts M\n");
            return 2;
        }
        mp_error err;
        if (model && model_geometry(model, &layers, &experts, &err)) {
            fprintf(stderr, "moeplan profile: error: %s\n", err.msg);
            return 1;
        }
        mp_strp_geometry g = {layers, experts};
        mp_strp p;
        if (mp_strp_read_file(path, &g, &p, &err)) {
            fprintf(stderr, "moeplan profile: error: %s\n", err.msg);
            return 1;
        }
        printf("%s: valid STRP v1 for %u layers x %u experts: %u resident of %u ranked (%u pairs, slots %u), "
               "table %s; %s\n",
               path, p.n_layers, p.n_experts, mp_strp_resident(&p), mp_strp_ranking_len(&p), p.n_ranked, p.slots,
               mp_strp_table_name(p.table), others_verdict(&p));
        mp_strp_free(&p);
        return 0;
    }
    fprintf(stderr, "moeplan profile: error: unknown subcommand '%s': expected inspect or verify\n", sub);
    return 2;
}
