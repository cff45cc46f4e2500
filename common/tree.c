/* tree.c — document tree, strict YAML parser (libyaml events) and block-style emitter. */
#include "common/tree.h"
#include "common/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

const llm_yaml_limits llm_yaml_default_limits = {
    .max_bytes = (size_t)64 << 20, .max_depth = 16, .max_nodes = 4 << 20};

/* ---- construction ---- */

static llm_node *node_new(llm_node_kind kind)
{
    llm_node *n = calloc(1, sizeof *n);
    if (n)
        n->kind = kind;
    return n;
}

llm_node *llm_node_new_map(void) { return node_new(LLM_NODE_MAP); }
llm_node *llm_node_new_seq(void) { return node_new(LLM_NODE_SEQ); }

static llm_node *scalar_new(const char *v, int quoted)
{
    llm_node *n = node_new(LLM_NODE_SCALAR);
    if (!n)
        return NULL;
    n->value = strdup(v ? v : "");
    if (!n->value) {
        free(n);
        return NULL;
    }
    n->quoted = quoted;
    return n;
}

llm_node *llm_node_new_str(const char *v) { return scalar_new(v, 1); }

llm_node *llm_node_new_int(int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return scalar_new(buf, 0);
}

llm_node *llm_node_new_double(double v)
{
    char buf[40];
    if (isnan(v))
        snprintf(buf, sizeof buf, ".nan");
    else if (isinf(v))
        snprintf(buf, sizeof buf, v > 0 ? ".inf" : "-.inf");
    else
        snprintf(buf, sizeof buf, "%.17g", v);
    return scalar_new(buf, 0);
}

void llm_node_free(llm_node *n)
{
    if (!n)
        return;
    for (int i = 0; i < n->n; i++)
        llm_node_free(n->items[i]);
    free(n->items);
    free(n->key);
    free(n->value);
    free(n);
}

llm_node *llm_node_copy(const llm_node *n)
{
    if (!n)
        return NULL;
    llm_node *c = node_new(n->kind);
    if (!c)
        return NULL;
    c->quoted = n->quoted;
    c->line = n->line;
    if ((n->key && !(c->key = strdup(n->key))) || (n->value && !(c->value = strdup(n->value))))
        goto fail;
    if (n->n) {
        c->items = calloc((size_t)n->n, sizeof *c->items);
        if (!c->items)
            goto fail;
        c->cap = n->n;
        for (int i = 0; i < n->n; i++) {
            if (!(c->items[i] = llm_node_copy(n->items[i])))
                goto fail;
            c->n++;
        }
    }
    return c;
fail:
    llm_node_free(c);
    return NULL;
}

static int push(llm_node *parent, llm_node *child)
{
    if (parent->n == parent->cap) {
        if (parent->cap > (1 << 28))
            return -1;
        int cap = parent->cap ? 2 * parent->cap : 4;
        llm_node **items = realloc(parent->items, (size_t)cap * sizeof *items);
        if (!items)
            return -1;
        parent->items = items;
        parent->cap = cap;
    }
    parent->items[parent->n++] = child;
    return 0;
}

int llm_node_set(llm_node *map, const char *key, llm_node *child)
{
    if (!map || map->kind != LLM_NODE_MAP || !key || !child) {
        llm_node_free(child);
        return -1;
    }
    char *k = strdup(key);
    if (!k) {
        llm_node_free(child);
        return -1;
    }
    free(child->key);
    child->key = k;
    for (int i = 0; i < map->n; i++)
        if (!strcmp(map->items[i]->key, key)) {
            llm_node_free(map->items[i]);
            map->items[i] = child;
            return 0;
        }
    if (push(map, child)) {
        llm_node_free(child);
        return -1;
    }
    return 0;
}

int llm_node_set_str(llm_node *map, const char *key, const char *v)
{
    return llm_node_set(map, key, llm_node_new_str(v));
}

int llm_node_set_int(llm_node *map, const char *key, int64_t v)
{
    return llm_node_set(map, key, llm_node_new_int(v));
}

int llm_node_set_double(llm_node *map, const char *key, double v)
{
    return llm_node_set(map, key, llm_node_new_double(v));
}

int llm_node_append(llm_node *seq, llm_node *child)
{
    if (!seq || seq->kind != LLM_NODE_SEQ || !child || push(seq, child)) {
        llm_node_free(child);
        return -1;
    }
    return 0;
}

int llm_node_remove(llm_node *map, const char *key)
{
    if (!map || map->kind != LLM_NODE_MAP || !key)
        return -1;
    for (int i = 0; i < map->n; i++)
        if (!strcmp(map->items[i]->key, key)) {
            llm_node_free(map->items[i]);
            memmove(map->items + i, map->items + i + 1, (size_t)(map->n - i - 1) * sizeof *map->items);
            map->n--;
            return 0;
        }
    return -1;
}

/* ---- lookups and conversions ---- */

llm_node *llm_node_get(const llm_node *map, const char *key)
{
    if (!map || map->kind != LLM_NODE_MAP || !key)
        return NULL;
    for (int i = 0; i < map->n; i++)
        if (!strcmp(map->items[i]->key, key))
            return map->items[i];
    return NULL;
}

llm_node *llm_node_path(const llm_node *root, const char *dotted)
{
    if (!root || !dotted)
        return NULL;
    const llm_node *cur = root;
    const char *p = dotted;
    while (cur) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        char part[256];
        if (len == 0 || len >= sizeof part)
            return NULL;
        memcpy(part, p, len);
        part[len] = '\0';
        if (cur->kind == LLM_NODE_MAP) {
            cur = llm_node_get(cur, part);
        } else if (cur->kind == LLM_NODE_SEQ) {
            /* a decimal component indexes a sequence ("tensors.0.name") */
            char *end;
            errno = 0;
            long idx = strtol(part, &end, 10);
            if (errno || *end || idx < 0 || idx >= cur->n || part[0] < '0' || part[0] > '9')
                return NULL;
            cur = cur->items[idx];
        } else {
            return NULL;
        }
        if (!dot)
            return (llm_node *)cur;
        p = dot + 1;
    }
    return NULL;
}

const char *llm_node_str(const llm_node *n)
{
    return n && n->kind == LLM_NODE_SCALAR ? n->value : NULL;
}

/* Numbers and booleans come from plain scalars only: a quoted scalar is a string. */
static const char *plain_value(const llm_node *n)
{
    if (!n || n->kind != LLM_NODE_SCALAR || n->quoted || !n->value)
        return NULL;
    return n->value;
}

int llm_node_i64(const llm_node *n, int64_t *out)
{
    const char *s = plain_value(n);
    if (!s)
        return -1;
    const char *p = s;
    int neg = 0;
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    if (!*p)
        return -1;
    if (p[0] == '0' && p[1])
        return -1;   /* 0384: YAML 1.1 reads a leading 0 as octal, so no reading is safe */
    uint64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (uint64_t)INT64_MAX + 1)
            return -1;
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    } else {
        if (v > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)v;
    }
    return 0;
}

int llm_node_int(const llm_node *n, int *out)
{
    int64_t v;
    if (llm_node_i64(n, &v) || v < INT32_MIN || v > INT32_MAX)
        return -1;
    *out = (int)v;
    return 0;
}

int llm_node_double(const llm_node *n, double *out)
{
    return llm_parse_double(plain_value(n), out);   /* cli.c: the flags' reader */
}

int llm_node_bool(const llm_node *n, int *out)
{
    const char *s = plain_value(n);
    if (!s)
        return -1;
    static const char *const t[] = {"true", "yes", "on", "1"};
    static const char *const f[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, t[i])) {
            *out = 1;
            return 0;
        }
        if (!strcasecmp(s, f[i])) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

/* ---- parser ---- */

typedef struct {
    llm_node *node;
    char *pending_key; /* mapping: key read, value not yet */
    int key_line;
} frame;

typedef struct {
    const char *fname;
    const llm_yaml_limits *lim;
    llm_status *st;
    frame *stack;
    int depth;
    int nodes;
    llm_node *root;
} pstate;

static int perr(pstate *p, int line, const char *fmt, const char *arg)
{
    char msg[300];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    return llm_err(p->st, LLM_EDATA, "%s:%d: %s", p->fname, line, msg);
}

/* Attach a finished node to the container on top of the stack (or make it the root).
 * Takes ownership of n. */
static int attach(pstate *p, llm_node *n, int line)
{
    if (p->depth == 0) {
        p->root = n;
        return 0;
    }
    frame *f = &p->stack[p->depth - 1];
    if (f->node->kind == LLM_NODE_SEQ) {
        if (push(f->node, n)) {
            llm_node_free(n);
            return llm_err(p->st, LLM_ENOMEM, "%s: out of memory", p->fname);
        }
        return 0;
    }
    if (!f->pending_key) {
        /* n is a key */
        if (n->kind != LLM_NODE_SCALAR) {
            llm_node_free(n);
            return perr(p, line, "mapping keys must be scalars%s", NULL);
        }
        if (llm_node_get(f->node, n->value)) {
            /* the key comes from the input: keep the message on one printable line */
            char shown[201];
            snprintf(shown, sizeof shown, "%s", n->value);
            for (char *c = shown; *c; c++)
                if ((unsigned char)*c < 0x20 || *c == 0x7f)
                    *c = '?';
            int r = llm_err(p->st, LLM_EDATA, "%s:%d: duplicate key '%s'", p->fname, line, shown);
            llm_node_free(n);
            return r;
        }
        if (!n->quoted && !strcmp(n->value, "<<")) {
            llm_node_free(n);
            return perr(p, line, "merge keys ('<<') are not allowed%s", NULL);
        }
        f->pending_key = n->value;
        f->key_line = line;
        n->value = NULL;
        llm_node_free(n);
        return 0;
    }
    n->key = f->pending_key;
    f->pending_key = NULL;
    if (push(f->node, n)) {
        llm_node_free(n);
        return llm_err(p->st, LLM_ENOMEM, "%s: out of memory", p->fname);
    }
    return 0;
}

static int count_node(pstate *p, int line)
{
    if (++p->nodes > p->lim->max_nodes)
        return llm_err(p->st, LLM_EDATA, "%s:%d: more than %d nodes", p->fname, line, p->lim->max_nodes);
    return 0;
}

static int handle_event(pstate *p, yaml_event_t *ev, int *done)
{
    int line = (int)ev->start_mark.line + 1;
    switch (ev->type) {
    case YAML_STREAM_START_EVENT:
    case YAML_DOCUMENT_END_EVENT:
        return 0;
    case YAML_DOCUMENT_START_EVENT:
        if (p->root)
            return perr(p, line, "more than one document%s", NULL);
        if (ev->data.document_start.tag_directives.start != ev->data.document_start.tag_directives.end)
            return perr(p, line, "tag directives are not allowed%s", NULL);
        return 0;
    case YAML_STREAM_END_EVENT:
        *done = 1;
        return 0;
    case YAML_ALIAS_EVENT:
        return perr(p, line, "aliases are not allowed%s", NULL);
    case YAML_SCALAR_EVENT: {
        if (ev->data.scalar.anchor)
            return perr(p, line, "anchors are not allowed%s", NULL);
        if (ev->data.scalar.tag)
            return perr(p, line, "tags are not allowed%s", NULL);
        if (memchr(ev->data.scalar.value, 0, ev->data.scalar.length))
            return perr(p, line, "NUL character in a scalar%s", NULL);
        int r = count_node(p, line);
        if (r)
            return r;
        llm_node *n = scalar_new((const char *)ev->data.scalar.value,
                                 ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE);
        if (!n)
            return llm_err(p->st, LLM_ENOMEM, "%s: out of memory", p->fname);
        n->line = line;
        return attach(p, n, line);
    }
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        int is_map = ev->type == YAML_MAPPING_START_EVENT;
        const yaml_char_t *anchor = is_map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor;
        const yaml_char_t *tag = is_map ? ev->data.mapping_start.tag : ev->data.sequence_start.tag;
        if (anchor)
            return perr(p, line, "anchors are not allowed%s", NULL);
        if (tag)
            return perr(p, line, "tags are not allowed%s", NULL);
        if (p->depth >= p->lim->max_depth)
            return llm_err(p->st, LLM_EDATA, "%s:%d: nesting deeper than %d", p->fname, line, p->lim->max_depth);
        if (p->depth > 0) {
            frame *f = &p->stack[p->depth - 1];
            if (f->node->kind == LLM_NODE_MAP && !f->pending_key)
                return perr(p, line, "mapping keys must be scalars%s", NULL);
        }
        int r = count_node(p, line);
        if (r)
            return r;
        llm_node *n = node_new(is_map ? LLM_NODE_MAP : LLM_NODE_SEQ);
        if (!n)
            return llm_err(p->st, LLM_ENOMEM, "%s: out of memory", p->fname);
        n->line = line;
        p->stack[p->depth].node = n;
        p->stack[p->depth].pending_key = NULL;
        p->depth++;
        return 0;
    }
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT: {
        if (p->depth == 0)
            return perr(p, line, "unbalanced collection end%s", NULL);
        frame *f = &p->stack[--p->depth];
        llm_node *n = f->node;
        free(f->pending_key); /* cannot happen with a well-formed event stream */
        f->pending_key = NULL;
        f->node = NULL;
        return attach(p, n, n->line);
    }
    default:
        return 0;
    }
}

int llm_yaml_parse(const char *buf, size_t len, const char *fname, const llm_yaml_limits *lim,
                   llm_node **out, llm_status *st)
{
    *out = NULL;
    if (!lim)
        lim = &llm_yaml_default_limits;
    if (!fname)
        fname = "<yaml>";
    if (len > lim->max_bytes)
        return llm_err(st, LLM_EDATA, "%s: %zu bytes exceed the %zu-byte limit", fname, len, lim->max_bytes);
    if (memchr(buf, 0, len))
        return llm_err(st, LLM_EDATA, "%s: NUL byte in YAML text", fname);
    pstate p = {.fname = fname, .lim = lim, .st = st};
    int maxd = lim->max_depth > 0 ? lim->max_depth : 1;
    p.stack = calloc((size_t)maxd + 1, sizeof *p.stack);
    if (!p.stack)
        return llm_err(st, LLM_ENOMEM, "%s: out of memory", fname);
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        free(p.stack);
        return llm_err(st, LLM_ENOMEM, "%s: out of memory", fname);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING);
    int rc = 0, done = 0;
    while (!done && !rc) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = llm_err(st, LLM_EDATA, "%s:%d: %s%s%.200s", fname, (int)parser.problem_mark.line + 1,
                         parser.problem ? parser.problem : "malformed YAML",
                         parser.context ? " " : "", parser.context ? parser.context : "");
            break;
        }
        rc = handle_event(&p, &ev, &done);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    while (p.depth > 0) {
        frame *f = &p.stack[--p.depth];
        free(f->pending_key);
        llm_node_free(f->node);
    }
    free(p.stack);
    if (rc) {
        llm_node_free(p.root);
        return rc;
    }
    if (!p.root) {
        /* an empty document is an empty mapping (an empty config file) */
        p.root = llm_node_new_map();
        if (!p.root)
            return llm_err(st, LLM_ENOMEM, "%s: out of memory", fname);
    }
    *out = p.root;
    return 0;
}

/* ---- emitter ---- */

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} obuf;

static int write_cb(void *data, unsigned char *s, size_t n)
{
    obuf *o = data;
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 1024;
        while (cap < o->len + n + 1)
            cap *= 2;
        char *b = realloc(o->buf, cap);
        if (!b) {
            o->oom = 1;
            return 0;
        }
        o->buf = b;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
    return 1;
}

/* Would this text, written plain, read back as something other than a string
 * (a number, boolean or null)?  Conservative: anything number-like is quoted. */
static int looks_special(const char *s)
{
    static const char *const words[] = {"null", "~", "true", "false", "yes", "no", "on", "off",
                                        "y", "n", ".inf", "-.inf", "+.inf", ".nan", "inf", "nan",
                                        "-inf", "+inf", "infinity", "-infinity", "+infinity", "<<"};
    if (!*s)
        return 1;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (!strcasecmp(s, words[i]))
            return 1;
    const char *p = s;
    if (*p == '-' || *p == '+')
        p++;
    if (*p == '.')
        p++;
    return *p >= '0' && *p <= '9';
}

static int emit_node(yaml_emitter_t *em, const llm_node *n, int depth)
{
    yaml_event_t ev;
    if (depth > 64)
        return 0;
    if (n->key) {
        int q = looks_special(n->key);
        if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)n->key, (int)strlen(n->key), 1, 1,
                                          q ? YAML_SINGLE_QUOTED_SCALAR_STYLE : YAML_ANY_SCALAR_STYLE) ||
            !yaml_emitter_emit(em, &ev))
            return 0;
    }
    if (n->kind == LLM_NODE_SCALAR) {
        const char *v = n->value ? n->value : "";
        yaml_scalar_style_t style = YAML_ANY_SCALAR_STYLE;
        if (n->quoted && looks_special(v))
            style = YAML_SINGLE_QUOTED_SCALAR_STYLE;
        else if (!n->quoted)
            style = YAML_PLAIN_SCALAR_STYLE;
        return yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)v, (int)strlen(v), 1, 1, style) &&
               yaml_emitter_emit(em, &ev);
    }
    if (n->kind == LLM_NODE_MAP) {
        if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) ||
            !yaml_emitter_emit(em, &ev))
            return 0;
        for (int i = 0; i < n->n; i++)
            if (!n->items[i]->key || !emit_node(em, n->items[i], depth + 1))
                return 0;
        return yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev);
    }
    /* short sequences of scalars (shapes) read best in flow style: [768, 3072] */
    int flow = n->n <= 16;
    for (int i = 0; i < n->n && flow; i++)
        if (n->items[i]->kind != LLM_NODE_SCALAR)
            flow = 0;
    if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                              flow ? YAML_FLOW_SEQUENCE_STYLE : YAML_BLOCK_SEQUENCE_STYLE) ||
        !yaml_emitter_emit(em, &ev))
        return 0;
    for (int i = 0; i < n->n; i++) {
        /* sequence items carry no key even if one was left on a moved node */
        llm_node tmp = *n->items[i];
        tmp.key = NULL;
        if (!emit_node(em, &tmp, depth + 1))
            return 0;
    }
    return yaml_sequence_end_event_initialize(&ev) && yaml_emitter_emit(em, &ev);
}

int llm_yaml_emit(const llm_node *root, char **out, size_t *len, llm_status *st)
{
    *out = NULL;
    if (len)
        *len = 0;
    if (!root)
        return llm_err(st, LLM_ESOFTWARE, "emit: no tree");
    obuf o = {0};
    yaml_emitter_t em;
    yaml_event_t ev;
    if (!yaml_emitter_initialize(&em))
        return llm_err(st, LLM_ENOMEM, "emit: out of memory");
    yaml_emitter_set_output(&em, write_cb, &o);
    yaml_emitter_set_unicode(&em, 1);
    yaml_emitter_set_width(&em, -1);
    yaml_emitter_set_indent(&em, 2);
    llm_node top = *root;
    top.key = NULL;
    int ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) && yaml_emitter_emit(&em, &ev) &&
             yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) && yaml_emitter_emit(&em, &ev) &&
             emit_node(&em, &top, 0) &&
             yaml_document_end_event_initialize(&ev, 1) && yaml_emitter_emit(&em, &ev) &&
             yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(&em, &ev) &&
             yaml_emitter_flush(&em);
    const char *problem = em.problem;
    yaml_emitter_delete(&em);
    if (!ok || o.oom) {
        free(o.buf);
        if (o.oom)
            return llm_err(st, LLM_ENOMEM, "emit: out of memory");
        return llm_err(st, LLM_EDATA, "emit: %s", problem ? problem : "cannot write this tree as YAML");
    }
    if (!o.buf && !write_cb(&o, (unsigned char *)"", 0))
        return llm_err(st, LLM_ENOMEM, "emit: out of memory");
    *out = o.buf;
    if (len)
        *len = o.len;
    return 0;
}
