/* The configuration hash that zs_create compares across ranks. It covers a
 * canonical serialization, so formatting, comments, key order and literal
 * spelling (16 or 0x10 or 16L) never matter, and any changed value does:
 *
 *   "zeroshard-config-1\0"
 *   for each schema key, in table order: path '\0' type-tag value
 *   "app\0" then the app group as a value (members sorted by name)
 *
 * Values: integers as 8 little-endian bytes, floats as the bits of the double
 * (with -0.0 folded into 0.0), strings as an 8-byte length and the bytes.
 * Numbers in the app group are typed by their value, not their spelling, so
 * "lr = 1" and "lr = 1.0" hash the same: a float that holds an integer is
 * hashed as that integer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/alloc.h"
#include "core/config_internal.h"
#include "core/config_schema.h"
#include "core/error.h"

typedef struct buffer {
    unsigned char *data;
    size_t length;
    size_t capacity;
    int out_of_memory;
} buffer;

static void put(buffer *b, const void *bytes, size_t n) {
    if (b->out_of_memory) return;
    if (b->length + n > b->capacity) {
        size_t capacity = b->capacity ? b->capacity : 1024;
        while (capacity < b->length + n) capacity *= 2;
        unsigned char *grown = zs__realloc(b->data, capacity);
        if (!grown) {
            b->out_of_memory = 1;
            return;
        }
        b->data = grown;
        b->capacity = capacity;
    }
    memcpy(b->data + b->length, bytes, n);
    b->length += n;
}

static void put_tag(buffer *b, char tag) { put(b, &tag, 1); }

static void put_u64(buffer *b, uint64_t x) {
    unsigned char bytes[8];
    for (int i = 0; i < 8; i++) bytes[i] = (unsigned char)(x >> (8 * i));
    put(b, bytes, 8);
}

static void put_double(buffer *b, double x) {
    if (x == 0.0) x = 0.0; /* -0.0 and 0.0 are the same setting */
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    put_u64(b, bits);
}

static void put_string(buffer *b, const char *s) {
    size_t n = strlen(s);
    put_u64(b, (uint64_t)n);
    put(b, s, n);
}

static void put_settings(buffer *b, const zs__settings *settings) {
    const char *base = (const char *)settings;
    for (size_t i = 0; i < zs__config_key_count; i++) {
        const zs__key *key = &zs__config_keys[i];
        put(b, key->path, strlen(key->path) + 1);
        switch (key->type) {
        case ZS__KEY_INT: {
            put_tag(b, 'i');
            if (key->size == sizeof(int)) {
                int x;
                memcpy(&x, base + key->offset, sizeof x);
                put_u64(b, (uint64_t)(int64_t)x);
            } else {
                uint64_t x;
                memcpy(&x, base + key->offset, sizeof x);
                put_u64(b, x);
            }
            break;
        }
        case ZS__KEY_FLOAT: {
            double x;
            memcpy(&x, base + key->offset, sizeof x);
            put_tag(b, 'f');
            put_double(b, x);
            break;
        }
        case ZS__KEY_BOOL:
        case ZS__KEY_ENUM: {
            int x;
            memcpy(&x, base + key->offset, sizeof x);
            put_tag(b, key->type == ZS__KEY_BOOL ? 'b' : 'e');
            put_u64(b, (uint64_t)(int64_t)x);
            break;
        }
        case ZS__KEY_STRING:
            put_tag(b, 's');
            put_string(b, base + key->offset);
            break;
        }
    }
}

static int by_name(const void *a, const void *b) {
    const config_setting_t *x = *(const config_setting_t *const *)a;
    const config_setting_t *y = *(const config_setting_t *const *)b;
    return strcmp(config_setting_name(x), config_setting_name(y));
}

static void put_value(buffer *b, const config_setting_t *s) {
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:
        put_tag(b, 'i');
        put_u64(b, (uint64_t)config_setting_get_int64(s));
        break;
    case CONFIG_TYPE_FLOAT: {
        double x = config_setting_get_float(s);
        /* 2^63 is the first double past INT64_MAX. */
        if (isfinite(x) && x == floor(x) && x >= -9223372036854775808.0 &&
            x < 9223372036854775808.0) {
            put_tag(b, 'i');
            put_u64(b, (uint64_t)(int64_t)x);
        } else {
            put_tag(b, 'f');
            put_double(b, x);
        }
        break;
    }
    case CONFIG_TYPE_BOOL:
        put_tag(b, 'b');
        put_u64(b, config_setting_get_bool(s) ? 1u : 0u);
        break;
    case CONFIG_TYPE_STRING:
        put_tag(b, 's');
        put_string(b, config_setting_get_string(s));
        break;
    case CONFIG_TYPE_ARRAY:
    case CONFIG_TYPE_LIST: {
        int n = config_setting_length(s);
        put_tag(b, config_setting_type(s) == CONFIG_TYPE_ARRAY ? 'a' : 'l');
        put_u64(b, (uint64_t)n);
        for (int i = 0; i < n; i++) put_value(b, config_setting_get_elem(s, (unsigned)i));
        break;
    }
    case CONFIG_TYPE_GROUP: {
        int n = config_setting_length(s);
        put_tag(b, 'g');
        put_u64(b, (uint64_t)n);
        if (n == 0) break;
        const config_setting_t **members = zs__malloc((size_t)n * sizeof *members);
        if (!members) {
            b->out_of_memory = 1;
            break;
        }
        for (int i = 0; i < n; i++) members[i] = config_setting_get_elem(s, (unsigned)i);
        qsort(members, (size_t)n, sizeof *members, by_name);
        for (int i = 0; i < n; i++) {
            put_string(b, config_setting_name(members[i]));
            put_value(b, members[i]);
        }
        free(members);
        break;
    }
    default: put_tag(b, '?'); break;
    }
}

zs_status zs__config_compute_hash(const zs__settings *settings, const config_t *lc, uint64_t *out) {
    buffer b = {0};
    static const char magic[] = "zeroshard-config-1";
    put(&b, magic, sizeof magic);
    put_settings(&b, settings);
    put(&b, "app", 4);
    const config_setting_t *app = config_setting_get_member(config_root_setting(lc), "app");
    if (app) {
        put_value(&b, app);
    } else {
        /* No app group hashes like an empty one: neither holds any key. */
        put_tag(&b, 'g');
        put_u64(&b, 0);
    }
    if (b.out_of_memory) {
        free(b.data);
        return zs__fail(ZS_ERR_OUT_OF_MEMORY, "out of memory hashing the configuration");
    }
    *out = XXH3_64bits(b.data, b.length);
    free(b.data);
    return ZS_OK;
}
