/* tokenizer/chat.c — chat templates: turn one user message into the prompt text a chat model was
 * trained on. Only the single-turn user → assistant form is produced (what `moeplan run` and the
 * prompt runner need); the result is plain text whose special-token strings the caller encodes
 * with parse_special on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

typedef struct chat_template {
    const char *name;
    const char *before; /* text before the message */
    const char *after;  /* text after it: up to the assistant's first token */
} chat_template;

static const chat_template k_templates[] = {
    /* ChatML, as used by the qwen2 / qwen3 families. */
    {"chatml", "<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"},
    /* Mistral's instruction form (Mixtral-8x7B-Instruct); the BOS comes from the tokenizer */
    {"mistral", "[INST] ", " [/INST]"},
    /* Tulu's, as OLMoE-1B-7B-Instruct uses it */
    {"tulu", "<|user|>\n", "\n<|assistant|>\n"},
    /* OpenAI's harmony (gpt-oss): the prompt stops at the assistant's role; the model writes its
     * channel ("<|channel|>analysis<|message|>...") itself. The system message the Jinja template
     * adds by default (model identity, reasoning effort) is left out, as in the other forms. */
    {"harmony", "<|start|>user<|message|>", "<|end|><|start|>assistant"},
};

const char *mp_chat_template_classify(const char *text, size_t len)
{
    /* the markers of each family's Jinja template, searched in the first len bytes */
    static const struct {
        const char *marker, *also, *name;
    } k_marks[] = {{"<|im_start|>", NULL, "chatml"},
                   {"[INST]", NULL, "mistral"},
                   {"<|user|>", "<|assistant|>", "tulu"},
                   {"<|start|>", "<|message|>", "harmony"}};
    if (!text)
        return NULL;
    for (size_t i = 0; i < sizeof k_marks / sizeof k_marks[0]; i++) {
        const char *m = k_marks[i].marker, *a = k_marks[i].also;
        if (memmem(text, len, m, strlen(m)) && (!a || memmem(text, len, a, strlen(a))))
            return k_marks[i].name;
    }
    return NULL;
}

mp_status mp_chat_apply(const char *template_name, const char *user_msg, char **out, mp_error *err)
{
    *out = NULL;
    if (!user_msg)
        return mp_fail(err, MP_ERR_ARG, "chat template: no user message");
    const chat_template *tpl = NULL;
    for (size_t i = 0; i < sizeof k_templates / sizeof k_templates[0]; i++)
        if (template_name && strcmp(template_name, k_templates[i].name) == 0)
            tpl = &k_templates[i];
    if (!tpl) {
        char names[128]; /* "chatml, mistral, ...": the table's names, for the message */
        size_t o = 0;
        for (size_t i = 0; i < sizeof k_templates / sizeof k_templates[0] && o < sizeof names; i++)
            o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", i ? ", " : "", k_templates[i].name);
        return mp_fail(err, MP_ERR_UNSUPPORTED, "chat template '%s': unsupported, expected one of: %s",
                       template_name ? template_name : "(null)", names);
    }
    size_t lb = strlen(tpl->before), lm = strlen(user_msg), la = strlen(tpl->after);
    char *s = malloc(lb + lm + la + 1);
    if (!s)
        return mp_fail(err, MP_ERR_NOMEM, "chat template '%s': out of memory", tpl->name);
    memcpy(s, tpl->before, lb);
    memcpy(s + lb, user_msg, lm);
    memcpy(s + lb + lm, tpl->after, la + 1);
    *out = s;
    return MP_OK;
}
