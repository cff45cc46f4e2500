/* Unit tests for common/tree.c: strict YAML parsing and a round-tripping emitter. */
#include "tests/unit/testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/tree.h"

static llm_node *parse(const char *y, llm_status *st)
{
    llm_node *n = NULL;
    llm_status_clear(st);
    llm_yaml_parse(y, strlen(y), "t.yaml", NULL, &n, st);
    return n;
}

static void expect_error(const char *y, const char *needle)
{
    llm_status st;
    llm_node *n = parse(y, &st);
    if (n)
        fprintf(stderr, "accepted: %s\n", y);
    assert_null(n);
    assert_int_equal(st.code, LLM_EDATA);
    if (!strstr(st.msg, needle))
        fprintf(stderr, "message '%s' lacks '%s'\n", st.msg, needle);
    assert_non_null(strstr(st.msg, needle));
}

static void test_parse_basic(void **state)
{
    (void)state;
    llm_status st;
    llm_node *n = parse("model:\n  arch: gpt2\n  n_layer: 12\n  lr: 3e-4\n  name: \"123\"\n"
                        "list: [1, 2, 3]\nflag: yes\nempty:\n",
                        &st);
    assert_non_null(n);
    assert_int_equal(n->kind, LLM_NODE_MAP);
    int v;
    assert_int_equal(llm_node_int(llm_node_path(n, "model.n_layer"), &v), 0);
    assert_int_equal(v, 12);
    assert_int_equal(llm_node_path(n, "model.n_layer")->line, 3);
    double d;
    assert_int_equal(llm_node_double(llm_node_path(n, "model.lr"), &d), 0);
    assert_true(d == 3e-4);
    /* a quoted number is a string */
    assert_int_equal(llm_node_int(llm_node_path(n, "model.name"), &v), -1);
    assert_string_equal(llm_node_str(llm_node_path(n, "model.name")), "123");
    assert_int_equal(llm_node_int(llm_node_path(n, "list.2"), &v), 0);
    assert_int_equal(v, 3);
    assert_null(llm_node_path(n, "list.3"));
    int b;
    assert_int_equal(llm_node_bool(llm_node_get(n, "flag"), &b), 0);
    assert_int_equal(b, 1);
    assert_string_equal(llm_node_str(llm_node_get(n, "empty")), "");
    assert_int_equal(llm_node_int(llm_node_path(n, "model.arch"), &v), -1);
    llm_node_free(n);
}

static void test_parse_refusals(void **state)
{
    (void)state;
    expect_error("a: 1\nb: 2\na: 3\n", "t.yaml:3: duplicate key 'a'");
    expect_error("a: &x 1\nb: *x\n", "anchors");
    expect_error("a: *x\n", "t.yaml:1");
    expect_error("a: !!str 1\n", "tags");
    expect_error("base: {x: 1}\nb:\n  <<: {x: 1}\n", "merge");
    expect_error("? [1, 2]\n: 3\n", "keys must be scalars");
    expect_error("a: [1, 2\n", "t.yaml:");
    expect_error("a: 1\n---\nb: 2\n", "more than one document");
    expect_error("\"a\\nb\": 1\n\"a\\nb\": 2\n", "duplicate key 'a?b'");
    expect_error("a: \"x\\0y\"\n", "NUL");
    expect_error("%TAG ! tag:example.com,2000:\n---\na: 1\n", "tag");
    /* depth cap */
    char deep[200] = "";
    for (int i = 0; i < 40; i++)
        strcat(deep, "[");
    expect_error(deep, "nesting");
    /* node cap and size cap */
    llm_yaml_limits lim = {.max_bytes = 100, .max_depth = 8, .max_nodes = 5};
    llm_status st;
    llm_node *n = NULL;
    const char *y = "[1, 2, 3, 4, 5, 6]";
    assert_int_equal(llm_yaml_parse(y, strlen(y), "x", &lim, &n, &st), LLM_EDATA);
    assert_non_null(strstr(st.msg, "nodes"));
    char big[200];
    memset(big, 'a', sizeof big);
    assert_int_equal(llm_yaml_parse(big, sizeof big, "x", &lim, &n, &st), LLM_EDATA);
    assert_null(n);
}

static void test_conversions(void **state)
{
    (void)state;
    llm_status st;
    llm_node *n = parse("a: 9223372036854775807\nb: 9223372036854775808\nc: -9223372036854775808\n"
                        "d: 0x10\ne: 1.5\nf: .inf\ng: 2147483648\nh: Off\ni: 0384\nj: 010\nk: 0\n"
                        "l: +7\n",
                        &st);
    assert_non_null(n);
    int64_t v;
    assert_int_equal(llm_node_i64(llm_node_get(n, "a"), &v), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(llm_node_i64(llm_node_get(n, "b"), &v), -1);
    assert_int_equal(llm_node_i64(llm_node_get(n, "c"), &v), 0);
    assert_true(v == INT64_MIN);
    assert_int_equal(llm_node_i64(llm_node_get(n, "d"), &v), -1);
    assert_int_equal(llm_node_i64(llm_node_get(n, "e"), &v), -1);
    /* leading zeros: octal to YAML 1.1 readers (PyYAML reads 010 as 8): refused */
    assert_int_equal(llm_node_i64(llm_node_get(n, "i"), &v), -1);
    assert_int_equal(llm_node_i64(llm_node_get(n, "j"), &v), -1);
    assert_int_equal(llm_node_i64(llm_node_get(n, "k"), &v), 0);
    assert_true(v == 0);
    assert_int_equal(llm_node_i64(llm_node_get(n, "l"), &v), 0);
    assert_true(v == 7);
    double d;
    assert_int_equal(llm_node_double(llm_node_get(n, "f"), &d), -1);
    assert_int_equal(llm_node_double(llm_node_get(n, "d"), &d), -1);   /* 0x10: not decimal */
    assert_int_equal(llm_node_double(llm_node_get(n, "e"), &d), 0);
    assert_true(d == 1.5);
    int i;
    assert_int_equal(llm_node_int(llm_node_get(n, "g"), &i), -1);
    assert_int_equal(llm_node_bool(llm_node_get(n, "h"), &i), 0);
    assert_int_equal(i, 0);
    assert_int_equal(llm_node_bool(llm_node_get(n, "e"), &i), -1);
    llm_node_free(n);
}

static int trees_equal(const llm_node *a, const llm_node *b)
{
    if (a->kind != b->kind || a->n != b->n)
        return 0;
    if ((a->key == NULL) != (b->key == NULL) || (a->key && strcmp(a->key, b->key)))
        return 0;
    if (a->kind == LLM_NODE_SCALAR) {
        if (strcmp(a->value, b->value))
            return 0;
        /* strings stay strings: a quoted scalar that looks like a number must come back quoted */
        int64_t x;
        if ((llm_node_i64(a, &x) == 0) != (llm_node_i64(b, &x) == 0))
            return 0;
    }
    for (int i = 0; i < a->n; i++)
        if (!trees_equal(a->items[i], b->items[i]))
            return 0;
    return 1;
}

static void test_emit_roundtrip(void **state)
{
    (void)state;
    llm_status st;
    llm_node *root = llm_node_new_map();
    llm_node *m = llm_node_new_map();
    assert_int_equal(llm_node_set(root, "model", m), 0);
    assert_int_equal(llm_node_set_str(m, "arch", "gpt2"), 0);
    assert_int_equal(llm_node_set_int(m, "n_layer", 12), 0);
    assert_int_equal(llm_node_set_int(m, "n_layer", 6), 0); /* replaces */
    assert_int_equal(m->n, 2);
    const char *tricky[] = {"123", "true", "no", "null", "~", "", "1e5", "-.5", ".inf", "a: b", "#x",
                            "- x", "line\nbreak", "  padded ", "'q'", "\"dq\"", "ünï", "[1]", "{a: 1}", "@x", "%y"};
    llm_node *s = llm_node_new_seq();
    for (size_t i = 0; i < sizeof tricky / sizeof *tricky; i++)
        assert_int_equal(llm_node_append(s, llm_node_new_str(tricky[i])), 0);
    assert_int_equal(llm_node_set(root, "strings", s), 0);
    const char *flowy[] = {"a, b", "[x]", "{y: 1}", "#z", "123", "", "q'uote", "x: y"};
    llm_node *fs = llm_node_new_seq();  /* short: emitted in flow style */
    for (size_t i = 0; i < sizeof flowy / sizeof *flowy; i++)
        assert_int_equal(llm_node_append(fs, llm_node_new_str(flowy[i])), 0);
    assert_int_equal(llm_node_set(root, "flow", fs), 0);
    double ds[] = {0.1, 1.0 / 3.0, 1e-300, -2.5e300, 6.02214076e23, 4.9e-324, 1.0};
    llm_node *dl = llm_node_new_seq();
    for (size_t i = 0; i < sizeof ds / sizeof *ds; i++)
        assert_int_equal(llm_node_append(dl, llm_node_new_double(ds[i])), 0);
    assert_int_equal(llm_node_set(root, "doubles", dl), 0);
    assert_int_equal(llm_node_set(root, "123", llm_node_new_int(-7)), 0);
    assert_int_equal(llm_node_set(root, "<<", llm_node_new_str("not a merge key")), 0);
    assert_int_equal(llm_node_set(root, "k\nwith newline", llm_node_new_str("v")), 0);
    char longkey[300];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    assert_int_equal(llm_node_set(root, longkey, llm_node_new_int(1)), 0);
    assert_int_equal(llm_node_set(root, "emptymap", llm_node_new_map()), 0);
    assert_int_equal(llm_node_set(root, "emptyseq", llm_node_new_seq()), 0);
    char *y = NULL;
    size_t len = 0;
    assert_int_equal(llm_yaml_emit(root, &y, &len, &st), 0);
    assert_int_equal(strlen(y), len);
    llm_node *back = NULL;
    if (llm_yaml_parse(y, len, "emitted", NULL, &back, &st))
        fprintf(stderr, "%s\n%s\n", st.msg, y);
    assert_non_null(back);
    assert_true(trees_equal(root, back));
    for (size_t i = 0; i < sizeof ds / sizeof *ds; i++) {
        double d;
        assert_int_equal(llm_node_double(llm_node_path(back, "doubles")->items[i], &d), 0);
        assert_true(d == ds[i]);
    }
    assert_int_equal(llm_node_remove(back, "doubles"), 0);
    assert_int_equal(llm_node_remove(back, "doubles"), -1);
    llm_node *cp = llm_node_copy(back);
    assert_true(trees_equal(cp, back));
    llm_node_free(cp);
    llm_node_free(back);
    free(y);
    llm_node_free(root);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_basic),
        cmocka_unit_test(test_parse_refusals),
        cmocka_unit_test(test_conversions),
        cmocka_unit_test(test_emit_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
