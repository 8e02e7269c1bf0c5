/*
 * test_common_json.c — validated unpacking with field paths, bounded
 * parsing, and the bounded buffer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "hf_buf.h"
#include "hf_err.h"
#include "hf_json.h"

#include <stdlib.h>
#include <string.h>

static json_t *load(const char *s)
{
    json_t *v = NULL;
    hf_jerr e;
    assert_int_equal(hf_json_parse(s, strlen(s), 32, 1, &v, &e), HF_OK);
    return v;
}

static void test_getters(void **state)
{
    (void)state;
    json_t *o = load("{\"s\": \"abc\", \"i\": 5, \"r\": 0.5, \"b\": true, \"o\": {}, \"a\": [1,2], \"fi\": 3.0}");
    const char *s = NULL;
    int64_t i = 0;
    double d = 0;
    int b = 0;
    json_t *x = NULL;
    hf_jerr e;
    assert_int_equal(hf_json_get_string(o, "root", "s", 1, 10, &s, &e), 0);
    assert_string_equal(s, "abc");
    assert_int_equal(hf_json_get_int(o, "root", "i", 1, 0, 10, &i, &e), 0);
    assert_int_equal(i, 5);
    assert_int_equal(hf_json_get_int(o, "root", "fi", 1, 0, 10, &i, &e), 0);
    assert_int_equal(i, 3);
    assert_int_equal(hf_json_get_number(o, "root", "r", 1, 0, 1, &d, &e), 0);
    assert_true(d == 0.5);
    assert_int_equal(hf_json_get_number(o, "root", "i", 1, 0, 10, &d, &e), 0);
    assert_true(d == 5.0);
    assert_int_equal(hf_json_get_bool(o, "root", "b", 1, &b, &e), 0);
    assert_true(b);
    assert_int_equal(hf_json_get_object(o, "root", "o", 1, &x, &e), 0);
    assert_int_equal(hf_json_get_array(o, "root", "a", 1, 2, &x, &e), 0);
    /* optional and absent: untouched, 0 */
    i = 42;
    assert_int_equal(hf_json_get_int(o, "root", "missing", 0, 0, 10, &i, &e), 0);
    assert_int_equal(i, 42);
    json_decref(o);
}

struct err_case { const char *doc; int which; const char *field; const char *msg; };

static void test_errors_name_field(void **state)
{
    (void)state;
    static const struct err_case cases[] = {
        {"{}", 0, "searcher.name", "required field is missing"},
        {"{\"name\": 3}", 0, "searcher.name", "must be a string, got an integer"},
        {"{\"name\": \"abcdefghijklmnop\"}", 0, "searcher.name", "longer than"},
        {"{\"max_trials\": \"7\"}", 1, "searcher.max_trials", "must be an integer, got a string"},
        {"{\"max_trials\": 0}", 1, "searcher.max_trials", "between 1 and"},
        {"{\"max_trials\": 1.5}", 1, "searcher.max_trials", "must be an integer"},
        {"{\"lr\": \"x\"}", 2, "searcher.lr", "must be a number"},
        {"{\"lr\": 2}", 2, "searcher.lr", "between"},
        {"{\"on\": 1}", 3, "searcher.on", "true or false"},
        {"{\"a\": {}}", 4, "searcher.a", "must be an array"},
        {"{\"a\": [1,2,3,4]}", 4, "searcher.a", "more than 3"},
        {"{\"bogus\": 1}", 5, "searcher.bogus", "unknown field"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        json_t *o = load(cases[k].doc), *x;
        const char *s;
        int64_t i;
        double d;
        int b, rc = 0;
        hf_jerr e;
        hf_jerr_clear(&e);
        static const char *const allowed[] = {"name", "max_trials", NULL};
        switch (cases[k].which) {
        case 0: rc = hf_json_get_string(o, "searcher", "name", 1, 10, &s, &e); break;
        case 1: rc = hf_json_get_int(o, "searcher", "max_trials", 1, 1, 1000, &i, &e); break;
        case 2: rc = hf_json_get_number(o, "searcher", "lr", 1, 0, 1, &d, &e); break;
        case 3: rc = hf_json_get_bool(o, "searcher", "on", 1, &b, &e); break;
        case 4: rc = hf_json_get_array(o, "searcher", "a", 1, 3, &x, &e); break;
        case 5: rc = hf_json_only_keys(o, "searcher", allowed, &e); break;
        }
        if (rc != HF_EINVAL || strcmp(e.field, cases[k].field) || !strstr(e.msg, cases[k].msg))
            fail_msg("case %zu: rc %d field '%s' msg '%s'", k, rc, e.field, e.msg);
        json_t *ej = hf_jerr_json(&e);
        assert_string_equal(json_string_value(json_object_get(ej, "field")), cases[k].field);
        json_decref(ej);
        json_decref(o);
    }
}

static void test_parse_limits(void **state)
{
    (void)state;
    json_t *v;
    hf_jerr e;
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    assert_int_equal(hf_json_parse(deep, sizeof deep, 32, 0, &v, &e), HF_EPARSE);
    assert_non_null(strstr(e.msg, "deeper"));
    /* brackets inside strings do not count */
    const char *s = "{\"a\": \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}";
    assert_int_equal(hf_json_parse(s, strlen(s), 4, 1, &v, &e), HF_OK);
    json_decref(v);
    assert_int_equal(hf_json_parse("[1]", 3, 4, 1, &v, &e), HF_EPARSE);
    assert_non_null(strstr(e.msg, "object"));
    assert_int_equal(hf_json_parse("{\"a\":", 5, 4, 1, &v, &e), HF_EPARSE);
    assert_non_null(strstr(e.msg, "line 1"));
    assert_int_equal(hf_json_parse("", 0, 4, 1, &v, &e), HF_EPARSE);
    json_t *one = json_integer(1);
    assert_int_equal(hf_json_depth(one), 1);
    json_decref(one);
}

static void test_buf_bounded(void **state)
{
    (void)state;
    hf_buf b;
    hf_buf_init(&b, 10);
    assert_int_equal(hf_buf_addstr(&b, "hello"), 0);
    assert_int_equal(hf_buf_addstr(&b, "world"), 0);
    assert_int_equal(b.len, 10);
    assert_int_equal(hf_buf_addstr(&b, "!"), HF_ETOOBIG);
    assert_string_equal(b.data, "helloworld");     /* unchanged after a refused add */
    hf_buf_consume(&b, 5);
    assert_string_equal(b.data, "world");
    assert_int_equal(hf_buf_printf(&b, "%d", 12345), 0);
    assert_string_equal(b.data, "world12345");
    assert_int_equal(hf_buf_printf(&b, "%d", 1), HF_ETOOBIG);
    size_t n;
    char *p = hf_buf_take(&b, &n);
    assert_int_equal(n, 10);
    assert_null(b.data);
    free(p);
    hf_buf_free(&b);
    assert_string_equal(hf_strerror(HF_ETOOBIG), "too large");
    assert_string_equal(hf_strerror(5), "unknown error");
    assert_string_equal(hf_strerror(-999), "unknown error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_errors_name_field),
        cmocka_unit_test(test_parse_limits),
        cmocka_unit_test(test_buf_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
