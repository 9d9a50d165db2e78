/*
 * optitpu safetensors: reader and writer for the Hugging Face safetensors format.
 *
 *     // write
 *     ot_st_entry e[] = {{.name = "w", .dtype = OT_ST_F32, .rank = 2, .dims = (int64_t[]){2, 3},
 *                         .data = w}};
 *     ot_st_kv meta[] = {{"format", "pt"}};
 *     ot_st_write_options wo = ot_st_write_options_default();
 *     OT_CHECK(ot_safetensors_write_file("w.safetensors", e, 1, meta, 1, &wo, NULL));
 *
 *     // read (zero-copy: the file is mapped, tensors point into the mapping)
 *     ot_safetensors *st;
 *     OT_CHECK(ot_safetensors_open("w.safetensors", &st));
 *     const ot_st_info *w = ot_safetensors_find(st, "w");
 *     ot_tensor view;                               // borrowed, valid until ot_safetensors_free
 *     OT_CHECK(ot_safetensors_tensor(st, "w", &view));
 *     ot_safetensors_free(st);
 *
 * Format (byte-exact with the reference implementation, huggingface/safetensors): an 8-byte
 * little-endian header length N; N bytes of UTF-8 JSON: an object mapping each tensor name to
 * {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data section) and an
 * optional "__metadata__" string-to-string map; then the data section, tensors little-endian,
 * row-major, contiguous.
 *
 * The reader enforces every rule the reference reader enforces, before any byte is trusted:
 * N <= 100,000,000; 8 + N within the buffer; the header is valid UTF-8 and valid JSON (leading and
 * trailing whitespace, such as the writer's space padding, is accepted); every entry has a known
 * dtype, a shape of non-negative integers and two integer offsets; sorted by offsets, tensors are
 * contiguous from 0 without holes or overlaps (begin == previous end, end >= begin); end - begin
 * == product(shape) * dtype size, computed with overflow checks; the data section ends exactly at
 * the end of the buffer (no trailing bytes, no truncation). Stricter than the reference in one
 * place (docs/checkpoints.md): a duplicated JSON key is rejected, where the reference silently
 * keeps one of the entries.
 *
 * The writer orders tensors as the reference does (descending dtype alignment, then name), emits
 * compact JSON with "__metadata__" first and pads the header with spaces to a multiple of 8, so
 * the data of every tensor is aligned to its element size. For a file with at most one metadata
 * entry the output is byte-identical to Python's safetensors.numpy.save_file.
 *
 * Errors: OT_ERR_CORRUPT_DATA for a malformed file (the message names the rule and, where there
 * is one, the tensor), OT_ERR_IO for system call failures (naming the file), OT_ERR_NOT_FOUND for
 * a missing tensor. Handles are immutable after open and may be read from many threads.
 */
#ifndef OPTITPU_SAFETENSORS_H
#define OPTITPU_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "optitpu/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The reference's dtypes, in the reference's order (its writer sorts by this order). */
typedef enum ot_st_dtype {
    OT_ST_BOOL = 0,
    OT_ST_U8,
    OT_ST_I8,
    OT_ST_F8_E5M2,
    OT_ST_F8_E4M3,
    OT_ST_I16,
    OT_ST_U16,
    OT_ST_F16,
    OT_ST_BF16,
    OT_ST_I32,
    OT_ST_U32,
    OT_ST_F32,
    OT_ST_F64,
    OT_ST_I64,
    OT_ST_U64,
    OT_ST_DTYPE_COUNT,
    OT_ST_DTYPE_INVALID = -1,
} ot_st_dtype;

#define OT_ST_MAX_HEADER 100000000u

OT_API const char *ot_st_dtype_name(ot_st_dtype t); /* "F32"; "?" when invalid */
OT_API size_t ot_st_dtype_size(ot_st_dtype t);      /* 0 when invalid */
OT_API ot_st_dtype ot_st_dtype_from_name(const char *name);
/* Mapping to and from core dtypes. The F8 dtypes have no core dtype (OT_DTYPE_INVALID). */
OT_API ot_st_dtype ot_st_dtype_from_core(ot_dtype t);
OT_API ot_dtype ot_st_dtype_to_core(ot_st_dtype t);

/* One tensor of a parsed file. Pointers stay valid until the handle is freed. */
typedef struct ot_st_info {
    const char *name;
    ot_st_dtype dtype;
    int rank;
    const int64_t *dims; /* rank entries (any rank; ot_safetensors_tensor needs <= OT_MAX_RANK) */
    uint64_t begin, end; /* offsets relative to the data section */
    const void *data;    /* points into the file image */
} ot_st_info;

typedef struct ot_st_kv {
    const char *key;
    const char *value;
} ot_st_kv;

typedef struct ot_safetensors ot_safetensors;

/* Parses a complete file image held by the caller. Zero-copy: the handle points into buf, which
 * must stay valid and unchanged until ot_safetensors_free. On failure *out is NULL. */
OT_API ot_status ot_safetensors_parse(const void *buf, size_t len, ot_safetensors **out);
/* Maps the file read-only and parses it (zero-copy); the mapping lives as long as the handle. */
OT_API ot_status ot_safetensors_open(const char *path, ot_safetensors **out);
OT_API void ot_safetensors_free(ot_safetensors *st); /* NULL is a no-op */

/* Tensors in data-offset order. */
OT_API size_t ot_safetensors_count(const ot_safetensors *st);
OT_API const ot_st_info *ot_safetensors_at(const ot_safetensors *st, size_t i);
OT_API const ot_st_info *ot_safetensors_find(const ot_safetensors *st, const char *name);
/* "__metadata__" entries in file order (0 when the file has none). */
OT_API size_t ot_safetensors_metadata_count(const ot_safetensors *st);
OT_API ot_st_kv ot_safetensors_metadata_at(const ot_safetensors *st, size_t i);
OT_API const char *ot_safetensors_metadata_get(const ot_safetensors *st, const char *key);
OT_API uint64_t ot_safetensors_header_len(const ot_safetensors *st); /* N */
OT_API uint64_t ot_safetensors_data_len(const ot_safetensors *st);

/* A borrowed ot_tensor over a tensor's bytes (no copy), valid until ot_safetensors_free.
 * OT_ERR_NOT_FOUND for an unknown name; OT_ERR_UNIMPLEMENTED for F8 (no core dtype);
 * OT_ERR_OUT_OF_RANGE for rank > OT_MAX_RANK. */
OT_API ot_status ot_safetensors_tensor(const ot_safetensors *st, const char *name, ot_tensor *view);

/* ---------------------------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------------------------- */

typedef struct ot_st_entry {
    const char *name; /* non-empty, unique, not "__metadata__" */
    ot_st_dtype dtype;
    int rank;
    const int64_t *dims;
    const void *data; /* product(dims) * dtype size bytes, read-only during the call */
} ot_st_entry;

typedef struct ot_st_write_options {
    bool fsync;  /* fsync the file before returning (default true) */
    bool atomic; /* write PATH.tmp, then rename over PATH and fsync the directory (default true) */
} ot_st_write_options;

OT_API ot_st_write_options ot_st_write_options_default(void);

/* Builds the header for entries (the reference's ordering and padding). *header (ot_free) holds
 * the 8-byte length and the padded JSON; order[i] (ot_free) is the index into entries of the
 * i-th tensor in the data section; *data_len the data section size. Validates names, dtypes,
 * shapes (overflow-checked) and metadata. */
OT_API ot_status ot_safetensors_build_header(const ot_st_entry *entries, size_t n,
                                             const ot_st_kv *meta, size_t nmeta, void **header,
                                             size_t *header_len, size_t **order,
                                             uint64_t *data_len);
/* Serializes to one ot_malloc'd buffer (free with ot_free). */
OT_API ot_status ot_safetensors_serialize(const ot_st_entry *entries, size_t n,
                                          const ot_st_kv *meta, size_t nmeta, void **out,
                                          size_t *out_len);
/* Writes a file; when sha256 is not NULL it receives the SHA-256 of the bytes written (hashed
 * concurrently with the writes, not in a second pass). On failure no file is left at PATH when
 * atomic (the temporary file is removed). */
OT_API ot_status ot_safetensors_write_file(const char *path, const ot_st_entry *entries, size_t n,
                                           const ot_st_kv *meta, size_t nmeta,
                                           const ot_st_write_options *o, uint8_t sha256[32]);

#ifdef __cplusplus
}
#endif

#endif /* OPTITPU_SAFETENSORS_H */
