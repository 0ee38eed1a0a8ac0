/* Where the tensors of a Hugging Face checkpoint are: one safetensors file
 * (model.safetensors), or the files a model.safetensors.index.json names
 * in its weight_map (tensor name -> file name in the index's directory),
 * as transformers' save_pretrained writes them. The index is hostile input
 * like any file: read with a size bound the caller derives from the model,
 * lexed strictly (json_strict.h), every value a plain file name that
 * exists. zs_params_import_safetensors (hf_import.c) reads through it. */
#ifndef ZS_CHECKPOINT_HF_INDEX_H
#define ZS_CHECKPOINT_HF_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "zeroshard.h"

#define ZS_HF_SINGLE_FILE "model.safetensors"
#define ZS_HF_INDEX_FILE "model.safetensors.index.json"

/* One weight_map entry. */
typedef struct zs__hf_entry {
    char *name; /* the tensor's name */
    int file;   /* index into zs__hf_layout.files */
} zs__hf_entry;

typedef struct zs__hf_layout {
    char *source;  /* what messages name: the index, or the single file */
    char *dir;     /* the directory of the files */
    int indexed;   /* 1: tensors are where the index says; 0: all in files[0] */
    int file_count;
    char **files;  /* names inside dir, each once, in the order first named */
    int entry_count;
    zs__hf_entry *entries; /* sorted by name (indexed only) */
} zs__hf_layout;

/* What a caller allows an index to claim (both > 0): its bytes, checked
 * before it is read, and its weight_map's entries, counted while lexing. */
typedef struct zs__hf_index_limits {
    size_t max_bytes;
    int max_entries;
    const char *expected; /* what the bounds come from, for messages */
} zs__hf_index_limits;

/* Resolves `path`: a directory holding model.safetensors.index.json (used
 * when present) or model.safetensors; an index file (its name ends in
 * ".json"); or a safetensors file. For an index: it must be a JSON object
 * whose "weight_map" is an object of strings, each a file name of one path
 * component (no '/', not "." or "..", no NUL) naming an existing regular
 * file in the index's directory; "metadata" and other keys are not used.
 * Symlinks are followed (a Hugging Face cache links every file). Messages
 * name the index and the entry. Not collective. Free *out with
 * zs__hf_layout_free. */
zs_status zs__hf_layout_open(const char *path, const zs__hf_index_limits *limits,
                             zs__hf_layout **out);
void zs__hf_layout_free(zs__hf_layout *l); /* NULL is a no-op */

/* The file holding `tensor`: files[] index, or -1 when an index does not
 * list it. Without an index every tensor is in file 0. */
int zs__hf_layout_file_of(const zs__hf_layout *l, const char *tensor);

/* dir + "/" + files[file] in a new string (NULL when out of memory). */
char *zs__hf_layout_path(const zs__hf_layout *l, int file);

#endif
