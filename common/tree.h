/* tree.h — a small document tree (mappings, sequences, scalars) with YAML in and out.
 *
 * It is the in-memory form of the .llmk header sections (model:, tokenizer:, train:,
 * shard:) and of llm-train's YAML configs.  The parser is strict because every file is
 * input from a stranger: plain mappings, sequences and scalars only (anchors, aliases
 * and tags are refused), depth and node count capped, duplicate keys refused, and every
 * node remembers its line so errors can name it ("run.yaml:12: unknown key 'lerning_rate'").
 */
#ifndef LLM_TREE_H
#define LLM_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

typedef enum { LLM_NODE_SCALAR, LLM_NODE_MAP, LLM_NODE_SEQ } llm_node_kind;

typedef struct llm_node {
    llm_node_kind kind;
    char *key;               /* key when this node is a mapping value, else NULL */
    char *value;             /* scalar text (NUL-terminated), NULL for MAP/SEQ */
    int quoted;              /* scalar was quoted in the source: a string, never a number */
    struct llm_node **items; /* children of MAP (each with key) or SEQ, in order */
    int n, cap;
    int line;                /* 1-based source line, 0 when built in code */
} llm_node;

typedef struct {
    size_t max_bytes;   /* input size cap */
    int max_depth;      /* nesting cap */
    int max_nodes;      /* total node cap */
} llm_yaml_limits;

/* Defaults: 64 MiB, depth 16, 4 million nodes (a header with 1M tensors fits). */
extern const llm_yaml_limits llm_yaml_default_limits;

/* Constructors; each returns NULL when out of memory.  Keys/values are copied. */
llm_node *llm_node_new_map(void);
llm_node *llm_node_new_seq(void);
llm_node *llm_node_new_str(const char *v);     /* a string scalar (emitted quoted when needed) */
llm_node *llm_node_new_int(int64_t v);
llm_node *llm_node_new_double(double v);       /* emitted with 17 significant digits */
void llm_node_free(llm_node *n);
llm_node *llm_node_copy(const llm_node *n);

/* Mapping edits.  set replaces an existing key or appends; takes ownership of child
 * (freed on failure).  Return 0, or -1 when out of memory / map is not a MAP. */
int llm_node_set(llm_node *map, const char *key, llm_node *child);
int llm_node_set_str(llm_node *map, const char *key, const char *v);
int llm_node_set_int(llm_node *map, const char *key, int64_t v);
int llm_node_set_double(llm_node *map, const char *key, double v);
int llm_node_append(llm_node *seq, llm_node *child);   /* takes ownership */
int llm_node_remove(llm_node *map, const char *key);   /* 0 removed, -1 absent */

/* Lookups.  get: direct child of a map; path: dotted path ("train.lr").  NULL if absent. */
llm_node *llm_node_get(const llm_node *map, const char *key);
llm_node *llm_node_path(const llm_node *root, const char *dotted);

/* Scalar conversions: 0 on success, -1 when not a scalar or malformed/out of range.
 * Integers accept decimal only; doubles accept what strtod accepts but must be finite;
 * booleans accept true/false/yes/no/on/off/1/0. */
int llm_node_i64(const llm_node *n, int64_t *out);
int llm_node_int(const llm_node *n, int *out);
int llm_node_double(const llm_node *n, double *out);
int llm_node_bool(const llm_node *n, int *out);
const char *llm_node_str(const llm_node *n);   /* scalar text or NULL */

/* Parse YAML text (one document).  fname is used in messages ("FILE:LINE: ...").
 * Errors: LLM_EDATA with the line named.  *out is owned by the caller. */
int llm_yaml_parse(const char *buf, size_t len, const char *fname, const llm_yaml_limits *lim,
                   llm_node **out, llm_status *st);

/* Emit block-style YAML; *out is malloc'd and NUL-terminated, *len excludes the NUL.
 * Parsing the result gives an equal tree. */
int llm_yaml_emit(const llm_node *root, char **out, size_t *len, llm_status *st);

#endif
