#include "common/json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void llm_json_init(llm_json *j, FILE *f, int pretty)
{
    memset(j, 0, sizeof *j);
    j->f = f;
    j->pretty = pretty;
    j->first[0] = 1;
}

static void indent(llm_json *j)
{
    if (!j->pretty)
        return;
    fputc('\n', j->f);
    for (int i = 0; i < j->depth; i++)
        fputs("  ", j->f);
}

/* Emit the separator before a value (or key) at the current depth. */
static void sep(llm_json *j)
{
    if (j->after_key) {
        j->after_key = 0;
        return;
    }
    if (j->depth > 0) {
        if (!j->first[j->depth])
            fputc(',', j->f);
        indent(j);
    }
    j->first[j->depth] = 0;
}

static void open(llm_json *j, char c)
{
    sep(j);
    fputc(c, j->f);
    if (j->depth + 1 < LLM_JSON_MAX_DEPTH)
        j->depth++;
    j->first[j->depth] = 1;
}

static void close_(llm_json *j, char c)
{
    int empty = j->first[j->depth];
    if (j->depth > 0)
        j->depth--;
    if (!empty)
        indent(j);
    fputc(c, j->f);
}

void llm_json_obj_begin(llm_json *j) { open(j, '{'); }
void llm_json_obj_end(llm_json *j) { close_(j, '}'); }
void llm_json_arr_begin(llm_json *j) { open(j, '['); }
void llm_json_arr_end(llm_json *j) { close_(j, ']'); }

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; min = 0x80; }
    else if ((c & 0xf0) == 0xe0) { len = 3; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; min = 0x10000; }
    else return 0;
    if (n < len)
        return 0;
    unsigned cp = c & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

void llm_json_write_escaped(FILE *f, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
            i++;
        } else if (c < 0x20) {
            switch (c) {
            case '\n': fputs("\\n", f); break;
            case '\t': fputs("\\t", f); break;
            case '\r': fputs("\\r", f); break;
            case '\b': fputs("\\b", f); break;
            case '\f': fputs("\\f", f); break;
            default: fprintf(f, "\\u%04x", c);
            }
            i++;
        } else if (c < 0x80) {
            fputc((int)c, f);
            i++;
        } else {
            size_t len = utf8_len(s + i, n - i);
            if (len == 0) {
                fputs("\\ufffd", f);
                i++;
            } else {
                fwrite(s + i, 1, len, f);
                i += len;
            }
        }
    }
    fputc('"', f);
}

void llm_json_key(llm_json *j, const char *key)
{
    sep(j);
    llm_json_write_escaped(j->f, key, strlen(key));
    fputs(j->pretty ? ": " : ":", j->f);
    j->after_key = 1;
}

void llm_json_strn(llm_json *j, const char *s, size_t n)
{
    sep(j);
    llm_json_write_escaped(j->f, s, n);
}

void llm_json_str(llm_json *j, const char *s)
{
    if (!s) {
        llm_json_null(j);
        return;
    }
    llm_json_strn(j, s, strlen(s));
}

void llm_json_num(llm_json *j, double v)
{
    sep(j);
    if (!isfinite(v)) {
        fputs("null", j->f);
        return;
    }
    char buf[40];
    /* the shortest of %.{6..17}g that reads back to the same double */
    for (int p = 6; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    fputs(buf, j->f);
}

void llm_json_int(llm_json *j, int64_t v)
{
    sep(j);
    fprintf(j->f, "%lld", (long long)v);
}

void llm_json_bool(llm_json *j, int v)
{
    sep(j);
    fputs(v ? "true" : "false", j->f);
}

void llm_json_null(llm_json *j)
{
    sep(j);
    fputs("null", j->f);
}

void llm_json_kstr(llm_json *j, const char *k, const char *v) { llm_json_key(j, k); llm_json_str(j, v); }
void llm_json_knum(llm_json *j, const char *k, double v) { llm_json_key(j, k); llm_json_num(j, v); }
void llm_json_kint(llm_json *j, const char *k, int64_t v) { llm_json_key(j, k); llm_json_int(j, v); }
void llm_json_kbool(llm_json *j, const char *k, int v) { llm_json_key(j, k); llm_json_bool(j, v); }
