/* Strict JSON for the checkpoint's hostile inputs (safetensors headers and
 * manifests). json-c alone accepts more than JSON (single quotes, NaN, raw
 * control characters in strings, integers clamped to 64 bits) and merges
 * duplicate keys silently, so a lexer checks the text first: RFC 8259 tokens
 * only, valid UTF-8, integers within int64, no "\u0000" in keys, containers at
 * most `max_depth` deep, arrays of at most `max_array` elements (0: no limit),
 * nothing but whitespace after the top-level object (only spaces, and no
 * leading whitespace, when `spaces_only`). After json-c parses it, the members
 * of the tree are counted against those of the text, which catches duplicate
 * keys. */
#ifndef ZS_CHECKPOINT_JSON_STRICT_H
#define ZS_CHECKPOINT_JSON_STRICT_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

struct json_object;

typedef struct zs__json_rules {
    int max_depth;
    int64_t max_array;
    int spaces_only;
} zs__json_rules;

/* `what` names the document in messages ("<where>: <what> ..."). On success
 * *out is a JSON object the caller releases with json_object_put. */
zs_status zs__json_parse_strict(const char *text, size_t bytes, const zs__json_rules *rules,
                                const char *where, const char *what, struct json_object **out);
/* The same, refusing a document whose top-level object has more than
 * max_top_members members (0: no limit) while lexing, before json-c
 * allocates a node for any of them; *over_limit (may be NULL) then says
 * so, for a caller with a message of its own. */
zs_status zs__json_parse_strict_bounded(const char *text, size_t bytes,
                                        const zs__json_rules *rules, int64_t max_top_members,
                                        const char *where, const char *what, int *over_limit,
                                        struct json_object **out);

/* 1 if text[0..len) is well-formed UTF-8 (what the strict parser accepts in
 * strings), so writers can refuse names their readers would refuse. */
int zs__json_utf8_valid(const char *text, size_t len);

#endif
