/* json.h — a small streaming JSON writer with correct escaping.
 *
 * Commas and nesting are tracked for the caller; strings are escaped per RFC 8259
 * (control characters as \u00XX, invalid UTF-8 bytes replaced by U+FFFD so the output
 * is always valid JSON).  Non-finite numbers are written as null.
 */
#ifndef LLM_JSON_H
#define LLM_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define LLM_JSON_MAX_DEPTH 32

typedef struct {
    FILE *f;
    int depth;
    int pretty;                           /* indent nested values */
    unsigned char first[LLM_JSON_MAX_DEPTH]; /* 1 until the first value at that depth */
    int after_key;
} llm_json;

/* Start a writer on f (not owned).  pretty != 0 indents with two spaces. */
void llm_json_init(llm_json *j, FILE *f, int pretty);

void llm_json_obj_begin(llm_json *j);
void llm_json_obj_end(llm_json *j);
void llm_json_arr_begin(llm_json *j);
void llm_json_arr_end(llm_json *j);
void llm_json_key(llm_json *j, const char *key);
void llm_json_str(llm_json *j, const char *s);
void llm_json_strn(llm_json *j, const char *s, size_t n);
void llm_json_num(llm_json *j, double v);   /* shortest form that reads back exactly */
void llm_json_int(llm_json *j, int64_t v);
void llm_json_bool(llm_json *j, int v);
void llm_json_null(llm_json *j);

/* Key + value shorthands for objects. */
void llm_json_kstr(llm_json *j, const char *k, const char *v);
void llm_json_knum(llm_json *j, const char *k, double v);
void llm_json_kint(llm_json *j, const char *k, int64_t v);
void llm_json_kbool(llm_json *j, const char *k, int v);

/* Write s as a JSON string (with quotes) to f. */
void llm_json_write_escaped(FILE *f, const char *s, size_t n);

#endif
