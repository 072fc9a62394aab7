/* tests/unit/test_prompts.c — prompt files: every accepted form, and one test per malformed case
 * (the message names the file and the line / element and what was expected). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/prompts.h"

static mp_prompt_set parse_ok(const char *text)
{
    mp_prompt_set s;
    mp_error err;
    cr_assert_eq(mp_prompts_parse("p.json", text, strlen(text), &s, &err), MP_OK, "%s", err.msg);
    return s;
}

static void parse_bad(const char *text, const char *want)
{
    mp_prompt_set s;
    mp_error err;
    cr_assert_neq(mp_prompts_parse("p.json", text, strlen(text), &s, &err), MP_OK,
                  "accepted: %s", text);
    cr_assert(strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
    cr_assert(strstr(err.msg, "p.json"), "%s", err.msg);
    cr_assert_eq(s.n, 0);
    cr_assert_null(s.items);
}

Test(prompts, json_array_of_strings)
{
    mp_prompt_set s = parse_ok(" [\"Hello\", \"What is MoE?\"]\n");
    cr_assert_eq(s.n, 2);
    cr_assert_str_eq(s.items[1].text, "What is MoE?");
    cr_assert_str_eq(s.items[1].id, "1");
    cr_assert_eq(s.items[1].max_tokens, -1);
    mp_prompts_free(&s);
}

Test(prompts, jsonl_strings_and_objects)
{
    mp_prompt_set s = parse_ok("\"first\"\n\n{\"prompt\": \"second\", \"id\": \"q2\", "
                               "\"max_tokens\": 64}\r\n{\"prompt\": \"third\", \"id\": 7}\n");
    cr_assert_eq(s.n, 3);
    cr_assert_str_eq(s.items[0].id, "0");
    cr_assert_str_eq(s.items[1].text, "second");
    cr_assert_str_eq(s.items[1].id, "q2");
    cr_assert_eq(s.items[1].max_tokens, 64);
    cr_assert_str_eq(s.items[2].id, "7");
    mp_prompts_free(&s);
}

Test(prompts, one_record_jsonl_is_valid)
{
    mp_prompt_set s = parse_ok("{\"prompt\": \"only one\"}");
    cr_assert_eq(s.n, 1);
    cr_assert_str_eq(s.items[0].text, "only one");
    mp_prompts_free(&s);
}

Test(prompts, not_json) { parse_bad("[\"a\", b]", "line 1 column 7: not valid JSON"); }
Test(prompts, not_json_jsonl) { parse_bad("\"a\"\n{prompt: 1}\n", "line 2: not valid JSON"); }
Test(prompts, empty_file) { parse_bad("  \n\n", "empty file"); }
Test(prompts, empty_array) { parse_bad("[]", "no prompts"); }
Test(prompts, wrong_type_in_array) { parse_bad("[\"a\", 3]", "element 1: expected a string or an object"); }
Test(prompts, wrong_type_in_jsonl) { parse_bad("\"a\"\ntrue\n", "line 2: expected a string"); }
Test(prompts, empty_prompt) { parse_bad("[\"a\", \"\"]", "element 1: empty prompt"); }
Test(prompts, prompt_not_a_string) { parse_bad("{\"prompt\": 5}", "line 1: \"prompt\" must be a string"); }
Test(prompts, object_without_prompt) { parse_bad("{\"id\": \"x\"}", "line 1: object without \"prompt\""); }
Test(prompts, misspelt_key) { parse_bad("{\"prompt\": \"a\", \"max_token\": 3}", "line 1: unknown key \"max_token\""); }
Test(prompts, bad_max_tokens) { parse_bad("{\"prompt\": \"a\", \"max_tokens\": 0}", "\"max_tokens\" must be an integer"); }
Test(prompts, fractional_max_tokens) { parse_bad("{\"prompt\": \"a\", \"max_tokens\": 2.5}", "\"max_tokens\" must be an integer"); }
Test(prompts, repeated_id) { parse_bad("{\"prompt\": \"a\", \"id\": \"x\"}\n{\"prompt\": \"b\", \"id\": \"x\"}", "line 2: id \"x\" repeats prompt 0's"); }
Test(prompts, text_after_array) { parse_bad("[\"a\"] [\"b\"]", "line 1 column 7: text after the JSON array"); }
/* One value per line: a second object on the line was silently dropped before. */
Test(prompts, two_values_on_one_line) { parse_bad("{\"prompt\":\"a\"}{\"prompt\":\"b\"}\n", "line 1 column 15: text after the JSON value"); }
Test(prompts, repeated_key_jsonl) { parse_bad("\"x\"\n{\"prompt\": \"a\", \"prompt\": \"b\"}\n", "line 2: key \"prompt\" repeated"); }
Test(prompts, repeated_key_array) { parse_bad("[{\"prompt\": \"a\", \"id\": 1, \"id\": 2}]", "key \"id\" repeated"); }

Test(prompts, invalid_utf8_names_the_prompt_byte) { parse_bad("\"ok\"\n{\"prompt\": \"ab\xff\"}\n", "line 2: \"prompt\": byte 2 of the prompt: invalid UTF-8 (byte 0xff)"); }

Test(prompts, nul_byte)
{
    mp_prompt_set s;
    mp_error err;
    cr_assert_neq(mp_prompts_parse("p.json", "\"a\0b\"", 5, &s, &err), MP_OK);
    cr_assert(strstr(err.msg, "offset 2: NUL byte"), "%s", err.msg);
}

Test(prompts, missing_file)
{
    mp_prompt_set s;
    mp_error err;
    cr_assert_eq(mp_prompts_load("/nonexistent/prompts.jsonl", &s, &err), MP_ERR_IO);
    cr_assert(strstr(err.msg, "/nonexistent/prompts.jsonl: cannot open"), "%s", err.msg);
}
