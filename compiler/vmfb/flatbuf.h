/* A table-driven FlatBuffer builder, verifier and reader.
 *
 * Debian packages no C FlatBuffers library, so kiln describes each schema as data
 * (schema.h holds IREE's) and this one module interprets those descriptions. The
 * same descriptor set drives three things:
 *   - the builder, which checks every value against its field's kind as it is set
 *     and serializes a value tree into a byte-identical buffer for the same input;
 *   - the verifier, which checks every offset, size and alignment of an untrusted
 *     buffer before anything reads it, in time and memory bounded by its options;
 *   - the reader accessors, which bounds-check again on every access and return
 *     defaults or empty values instead of reading outside the buffer, so a reader
 *     bug (or a buffer nobody verified) cannot become a memory error.
 *
 * Format (the FlatBuffers binary format, little-endian): [u32 size prefix, when
 * size-prefixed][u32 root uoffset][4-byte file identifier]...; a table starts with
 * an i32 soffset to its vtable [u16 vtable bytes][u16 table bytes][u16 offset per
 * slot]; strings are [u32 len][bytes][NUL]; vectors [u32 count][elements]; a union
 * takes two slots (u8 type in slot N, the value in N+1), as does a vector of
 * unions ([u8] types, then [offset] values). Alignment is relative to the first
 * byte of the buffer (the size prefix when there is one), as with flatcc and
 * flatc; place the buffer at a multiple of the alignment given to finish.
 *
 * Slots: a table's fields[] has one entry per slot, in slot order (fields[i].slot
 * == i), deprecated ones included; kiln_vmfb_flatbuf_desc_check enforces this.
 */
#ifndef KILN_COMPILER_VMFB_FLATBUF_H_
#define KILN_COMPILER_VMFB_FLATBUF_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"

/* ---- schema descriptions (static data, Thread-safe to share) ---- */

typedef enum kiln_vmfb_flatbuf_kind_e {
  KILN_FLATBUF_NONE = 0, /* only as elem_kind of non-vector fields */
  /* scalars, stored inline in the table */
  KILN_FLATBUF_BOOL,
  KILN_FLATBUF_U8,
  KILN_FLATBUF_I8,
  KILN_FLATBUF_U16,
  KILN_FLATBUF_I16,
  KILN_FLATBUF_U32,
  KILN_FLATBUF_I32,
  KILN_FLATBUF_U64,
  KILN_FLATBUF_I64,
  KILN_FLATBUF_F32,
  KILN_FLATBUF_F64,
  /* inline struct: struct_size bytes aligned to struct_align */
  KILN_FLATBUF_STRUCT,
  /* uoffset fields */
  KILN_FLATBUF_STRING,
  KILN_FLATBUF_TABLE,         /* of `table` */
  KILN_FLATBUF_VECTOR,        /* of scalars of elem_kind */
  KILN_FLATBUF_VECTOR_STRUCT, /* of structs: struct_size, struct_align */
  KILN_FLATBUF_VECTOR_STRING,
  KILN_FLATBUF_VECTOR_TABLE, /* of `table` */
  /* unions: the type field sits in the slot right before its value field */
  KILN_FLATBUF_UNION_TYPE,        /* u8; 0 = NONE, i = union_desc->members[i - 1] */
  KILN_FLATBUF_UNION,             /* the value (a table) */
  KILN_FLATBUF_VECTOR_UNION_TYPE, /* [u8] type per element */
  KILN_FLATBUF_VECTOR_UNION,      /* [table offset] per element; 0 where the type is NONE */
} kiln_vmfb_flatbuf_kind_t;

typedef struct kiln_vmfb_flatbuf_table_desc_s kiln_vmfb_flatbuf_table_desc_t;

/* A union of tables: members[i] is the table of type code i + 1. */
typedef struct kiln_vmfb_flatbuf_union_desc_s {
  const char *name;
  const kiln_vmfb_flatbuf_table_desc_t *const *members;
  uint8_t member_count;
} kiln_vmfb_flatbuf_union_desc_t;

typedef struct kiln_vmfb_flatbuf_field_desc_s {
  const char *name; /* as in the .fbs; union type fields end in "_type" */
  uint16_t slot;    /* == its index in the table's fields[] */
  kiln_vmfb_flatbuf_kind_t kind;
  kiln_vmfb_flatbuf_kind_t elem_kind;               /* VECTOR: the scalar kind of each element */
  uint16_t struct_size;                             /* STRUCT, VECTOR_STRUCT */
  uint16_t struct_align;                            /* STRUCT, VECTOR_STRUCT: a power of two */
  const kiln_vmfb_flatbuf_table_desc_t *table;      /* TABLE, VECTOR_TABLE */
  const kiln_vmfb_flatbuf_union_desc_t *union_desc; /* UNION*, VECTOR_UNION* */
  bool required;                                    /* offset kinds only: the verifier rejects absence */
  bool deprecated;                                  /* keeps its slot; never written, verified or read */
  int64_t default_int;                              /* BOOL and integer kinds (U64 as two's complement) */
  double default_float;                             /* F32, F64 */
} kiln_vmfb_flatbuf_field_desc_t;

struct kiln_vmfb_flatbuf_table_desc_s {
  const char *name;                             /* short name ("BytecodeModuleDef"), used in error messages */
  const kiln_vmfb_flatbuf_field_desc_t *fields; /* fields[i].slot == i */
  uint16_t field_count;
};

/* Checks a descriptor graph (the table and everything reachable from it): slots
 * dense and in order, kinds with the attributes they need, struct sizes multiples
 * of their power-of-two alignment, each union type field followed by its value
 * field with the same union, `required` only on offset kinds, defaults in range.
 * Returns INVALID_ARGUMENT naming the first bad table.field. Borrows `desc`.
 * Thread-safe. */
KILN_MUST_USE kiln_status_t kiln_vmfb_flatbuf_desc_check(const kiln_vmfb_flatbuf_table_desc_t *desc);

/* Little-endian loads and stores for struct members and raw element data. They use
 * memcpy, so `p` needs no alignment. Thread-safe. */
static inline uint16_t kiln_vmfb_flatbuf_load_u16(const void *p) {
  const uint8_t *b = p;
  return (uint16_t)(b[0] | b[1] << 8);
}
static inline uint32_t kiln_vmfb_flatbuf_load_u32(const void *p) {
  const uint8_t *b = p;
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static inline uint64_t kiln_vmfb_flatbuf_load_u64(const void *p) {
  const uint8_t *b = p;
  return (uint64_t)kiln_vmfb_flatbuf_load_u32(b) | (uint64_t)kiln_vmfb_flatbuf_load_u32(b + 4) << 32;
}
static inline void kiln_vmfb_flatbuf_store_u16(void *p, uint16_t v) {
  uint8_t *b = p;
  b[0] = (uint8_t)v;
  b[1] = (uint8_t)(v >> 8);
}
static inline void kiln_vmfb_flatbuf_store_u32(void *p, uint32_t v) {
  uint8_t *b = p;
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static inline void kiln_vmfb_flatbuf_store_u64(void *p, uint64_t v) {
  kiln_vmfb_flatbuf_store_u32(p, (uint32_t)v);
  kiln_vmfb_flatbuf_store_u32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

/* ---- builder ----
 *
 * Build a value tree bottom-up or top-down in any order: add_* return a ref (a
 * handle, never 0 for a live value), tables stay mutable until finish, and a value
 * may be referenced from several places (it is written once). Misuse (a kind that
 * does not fit the field, a value out of range, an unset required field, a cycle)
 * is remembered as the builder's first error: later calls do nothing and return
 * ref 0, and finish returns that error. So writer code needs one check, at finish.
 * One owner; not thread-safe. */

typedef struct kiln_vmfb_flatbuf_builder_s kiln_vmfb_flatbuf_builder_t;
typedef uint32_t kiln_vmfb_flatbuf_ref_t; /* 0 = no value */

/* Tables may nest at most this deep on any path (the verifier's default too). */
#define KILN_VMFB_FLATBUF_MAX_DEPTH 64
/* The largest alignment a value or a buffer may ask for. */
#define KILN_VMFB_FLATBUF_MAX_ALIGN 4096

/* Creates an empty builder; the caller owns it (kiln_vmfb_flatbuf_builder_destroy).
 * Never fails. */
kiln_vmfb_flatbuf_builder_t *kiln_vmfb_flatbuf_builder_create(void);
/* Frees the builder and every value in it; NULL is a no-op. */
void kiln_vmfb_flatbuf_builder_destroy(kiln_vmfb_flatbuf_builder_t *b);

/* A string of `len` bytes (copied; may contain NULs; a NUL is appended). */
kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_string(kiln_vmfb_flatbuf_builder_t *b, const char *data,
                                                             size_t len);
/* A string from a NUL-terminated `s` (borrowed). */
kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_str(kiln_vmfb_flatbuf_builder_t *b, const char *s);
/* A [u8]/[i8] vector of `len` bytes (copied) whose first byte lands at a multiple of
 * `align` (a power of two up to KILN_VMFB_FLATBUF_MAX_ALIGN; 0 or 1: none) from the
 * buffer start: embedded SPIR-V words, PTX, rodata. */
kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_bytes(kiln_vmfb_flatbuf_builder_t *b, const void *data,
                                                            size_t len, size_t align);
/* A vector of `count` scalars of `elem_kind` (BOOL .. F64) from a host-order C array
 * (bool/uint8_t/.../double as the kind says; copied and stored little-endian). */
kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_scalars(kiln_vmfb_flatbuf_builder_t *b,
                                                              kiln_vmfb_flatbuf_kind_t elem_kind,
                                                              const void *elems, size_t count);
/* A vector of `count` structs of `struct_size` bytes each, already encoded
 * little-endian in `data` (copied), aligned to `struct_align` (a power of two). */
kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_structs(kiln_vmfb_flatbuf_builder_t *b,
                                                              const void *data, size_t count,
                                                              size_t struct_size, size_t struct_align);
/* A vector of strings or tables: `refs` (copied, none 0) must all be strings or all
 * tables of one descriptor; the field it is set into checks which. */
kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_vector(kiln_vmfb_flatbuf_builder_t *b,
                                                             const kiln_vmfb_flatbuf_ref_t *refs,
                                                             size_t count);
/* An empty table of `desc` (borrowed: must outlive the builder). */
kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_table(kiln_vmfb_flatbuf_builder_t *b,
                                                            const kiln_vmfb_flatbuf_table_desc_t *desc);

/* Set a field of `table` by slot. Scalars equal to the field's default are not
 * written (IREE's readers treat absent as default) unless forced. Setting a slot
 * again replaces the earlier value. */
/* Integer kinds and BOOL; the value must fit the kind (0/1 for BOOL). */
void kiln_vmfb_flatbuf_builder_set_uint(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                        uint16_t slot, uint64_t value);
void kiln_vmfb_flatbuf_builder_set_int(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                       uint16_t slot, int64_t value);
void kiln_vmfb_flatbuf_builder_set_bool(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                        uint16_t slot, bool value);
/* F32 (rounded to float) or F64. */
void kiln_vmfb_flatbuf_builder_set_float(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                         uint16_t slot, double value);
/* Writes a scalar field even when it equals its default (the default when unset). */
void kiln_vmfb_flatbuf_builder_force(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                     uint16_t slot);
/* STRUCT: `size` must equal the field's struct_size; bytes little-endian, copied. */
void kiln_vmfb_flatbuf_builder_set_struct(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                          uint16_t slot, const void *data, size_t size);
/* STRING, TABLE and the VECTOR kinds: `value` must be of the field's kind (a table
 * of the field's descriptor, a vector with the field's element size, ...). */
void kiln_vmfb_flatbuf_builder_set_ref(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                       uint16_t slot, kiln_vmfb_flatbuf_ref_t value);
/* A UNION field (slot of the value; the type goes to slot - 1): `type` 1..n with a
 * table of that member, or 0 with ref 0 to clear. */
void kiln_vmfb_flatbuf_builder_set_union(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                         uint16_t slot, uint8_t type, kiln_vmfb_flatbuf_ref_t value);
/* A VECTOR_UNION field: `count` pairs (types[i], values[i]) as for set_union (both
 * arrays copied). */
void kiln_vmfb_flatbuf_builder_set_union_vector(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                                uint16_t slot, const uint8_t *types,
                                                const kiln_vmfb_flatbuf_ref_t *values, size_t count);

typedef struct kiln_vmfb_flatbuf_finish_options_s {
  const char *identifier; /* exactly 4 characters, or NULL for none */
  bool size_prefixed;     /* a u32 byte count of the rest comes first */
  /* The buffer will start at a multiple of this (a power of two, 4 ..
   * KILN_VMFB_FLATBUF_MAX_ALIGN; 0: 16); a value asking for more is an error. */
  size_t base_alignment;
} kiln_vmfb_flatbuf_finish_options_t;

/* Serializes `root` (a table) and everything reachable from it and appends the
 * FlatBuffer to `out` (initialized by the caller; alignment is relative to out->len
 * on entry). Deterministic: the same values set in the same way give the same
 * bytes. The builder stays usable (finish again, or add more). Errors: the
 * builder's first misuse; INVALID_ARGUMENT for an unset required field, a cycle,
 * nesting deeper than KILN_VMFB_FLATBUF_MAX_DEPTH tables, an alignment above
 * base_alignment or bad options; RESOURCE_EXHAUSTED past 2 GiB (the format's
 * signed vtable offsets). On error `out` is left as it was. */
KILN_MUST_USE kiln_status_t
kiln_vmfb_flatbuf_builder_finish(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t root,
                                 const kiln_vmfb_flatbuf_finish_options_t *options, kiln_buf_t *out);

/* ---- verifier ---- */

typedef struct kiln_vmfb_flatbuf_verify_options_s {
  const char *identifier;        /* 4 characters that must match, or NULL: not checked */
  bool size_prefixed;            /* the u32 size prefix comes first; bytes after the size
                                    it states are ignored (as by flatcc and IREE) */
  uint32_t max_depth;            /* tables on any path; 0: KILN_VMFB_FLATBUF_MAX_DEPTH;
                                    at most 1024 */
  uint64_t max_objects;          /* tables, strings and vectors visited, counting each
                                    visit of a shared one; 0: 1024 + len / 2 */
  kiln_status_code_t error_code; /* code of a failure; 0: INVALID_ARGUMENT
                                    (a cache reading its own bytes passes DATA_LOSS) */
} kiln_vmfb_flatbuf_verify_options_t;

/* Checks `len` bytes at `data` (borrowed; no alignment needed) against the root
 * table `desc`: header and identifier, every uoffset (nonzero, in bounds, aligned),
 * every vtable (in bounds, even size >= 4) and table size, every field within its
 * table and aligned, strings NUL-terminated, vector counts in bounds without
 * overflow, union types known and values present exactly when typed, required
 * fields present, nesting and total visits within the options. Unknown slots past
 * the descriptor's are ignored (newer writers). Returns NULL when the buffer is
 * safe to read with the accessors below, else a status whose message names the path
 * and the problem, e.g. "BytecodeModuleDef.rodata_segments[3].embedded_data: vector
 * extends past the end of the buffer (offset 1234, length 99999, buffer 4096)".
 * Alignment is checked relative to `data`, so pass a size-prefixed buffer from its
 * prefix (IREE's loader hands flatcc the bytes after the prefix, and flatcc then
 * checks scalar fields against absolute addresses instead; the two agree when the
 * prefix sits at a multiple of 8, as in a VMFB).
 * Uses stack and memory bounded by max_depth, never by the buffer's contents.
 * `options` may be NULL (no identifier, not size-prefixed, defaults). Thread-safe. */
KILN_MUST_USE kiln_status_t kiln_vmfb_flatbuf_verify(const void *data, size_t len,
                                                     const kiln_vmfb_flatbuf_verify_options_t *options,
                                                     const kiln_vmfb_flatbuf_table_desc_t *desc);

/* ---- reader ----
 *
 * Handles are small values that borrow the buffer (it must outlive them). Every
 * accessor re-checks bounds, so on a buffer that failed (or skipped) verification
 * they return absent/default/empty instead of reading out of bounds. A kind that
 * does not fit the accessor (get_uint on a string) also reads as absent. All are
 * Thread-safe (they only read). */

typedef struct kiln_vmfb_flatbuf_table_s {
  const uint8_t *data; /* the whole buffer; NULL: no table */
  size_t len;
  size_t pos; /* the table's offset in data */
  const kiln_vmfb_flatbuf_table_desc_t *desc;
} kiln_vmfb_flatbuf_table_t;

typedef struct kiln_vmfb_flatbuf_vector_s {
  const uint8_t *data; /* the whole buffer; NULL: no vector */
  size_t len;
  size_t pos;   /* offset of element 0 */
  size_t count; /* 0 when absent or not within the buffer */
  size_t elem_size;
  const kiln_vmfb_flatbuf_field_desc_t *field; /* the vector's field */
} kiln_vmfb_flatbuf_vector_t;

/* The root table of the buffer, as `desc`; absent (data NULL) when the header is
 * not within `len` bytes. */
kiln_vmfb_flatbuf_table_t kiln_vmfb_flatbuf_root(const void *data, size_t len, bool size_prefixed,
                                                 const kiln_vmfb_flatbuf_table_desc_t *desc);
/* True when `t` refers to a table. */
bool kiln_vmfb_flatbuf_table_exists(kiln_vmfb_flatbuf_table_t t);
/* True when the slot has a value in the buffer (for scalars: was written). */
bool kiln_vmfb_flatbuf_table_has(kiln_vmfb_flatbuf_table_t t, uint16_t slot);
/* Scalars: the stored value, else the field's default. get_uint/get_int convert
 * between signednesses as C casts do; BOOL and UNION_TYPE read as integers. */
uint64_t kiln_vmfb_flatbuf_table_get_uint(kiln_vmfb_flatbuf_table_t t, uint16_t slot);
int64_t kiln_vmfb_flatbuf_table_get_int(kiln_vmfb_flatbuf_table_t t, uint16_t slot);
bool kiln_vmfb_flatbuf_table_get_bool(kiln_vmfb_flatbuf_table_t t, uint16_t slot);
double kiln_vmfb_flatbuf_table_get_float(kiln_vmfb_flatbuf_table_t t, uint16_t slot);
/* A STRING: pointer to its bytes (NUL-terminated; may contain NULs), its length in
 * *out_len (optional); NULL and 0 when absent. */
const char *kiln_vmfb_flatbuf_table_get_string(kiln_vmfb_flatbuf_table_t t, uint16_t slot, size_t *out_len);
/* A TABLE field (absent handle when unset). */
kiln_vmfb_flatbuf_table_t kiln_vmfb_flatbuf_table_get_table(kiln_vmfb_flatbuf_table_t t, uint16_t slot);
/* A STRUCT field: its struct_size bytes (read members with load_*); NULL when unset. */
const uint8_t *kiln_vmfb_flatbuf_table_get_struct(kiln_vmfb_flatbuf_table_t t, uint16_t slot);
/* Any VECTOR* field (count 0 when unset). */
kiln_vmfb_flatbuf_vector_t kiln_vmfb_flatbuf_table_get_vector(kiln_vmfb_flatbuf_table_t t, uint16_t slot);
/* A UNION field (slot of the value): returns the type (0: NONE) and the member
 * table in *out_value (absent for NONE or an unknown type). */
uint8_t kiln_vmfb_flatbuf_table_get_union(kiln_vmfb_flatbuf_table_t t, uint16_t slot,
                                          kiln_vmfb_flatbuf_table_t *out_value);
/* A VECTOR_UNION field (slot of the values): the element count (0 when the type and
 * value vectors disagree), and element i as for get_union. */
size_t kiln_vmfb_flatbuf_table_get_union_count(kiln_vmfb_flatbuf_table_t t, uint16_t slot);
uint8_t kiln_vmfb_flatbuf_table_get_union_at(kiln_vmfb_flatbuf_table_t t, uint16_t slot, size_t index,
                                             kiln_vmfb_flatbuf_table_t *out_value);

/* Vector elements; an index >= count reads as 0/NULL/absent. */
size_t kiln_vmfb_flatbuf_vector_count(kiln_vmfb_flatbuf_vector_t v);
/* Element 0 of a VECTOR or VECTOR_STRUCT (count * elem_size bytes, in bounds);
 * NULL when empty. For [u8] this is the embedded data. */
const uint8_t *kiln_vmfb_flatbuf_vector_data(kiln_vmfb_flatbuf_vector_t v);
uint64_t kiln_vmfb_flatbuf_vector_get_uint(kiln_vmfb_flatbuf_vector_t v, size_t index);
int64_t kiln_vmfb_flatbuf_vector_get_int(kiln_vmfb_flatbuf_vector_t v, size_t index);
double kiln_vmfb_flatbuf_vector_get_float(kiln_vmfb_flatbuf_vector_t v, size_t index);
const char *kiln_vmfb_flatbuf_vector_get_string(kiln_vmfb_flatbuf_vector_t v, size_t index, size_t *out_len);
kiln_vmfb_flatbuf_table_t kiln_vmfb_flatbuf_vector_get_table(kiln_vmfb_flatbuf_vector_t v, size_t index);
const uint8_t *kiln_vmfb_flatbuf_vector_get_struct(kiln_vmfb_flatbuf_vector_t v, size_t index);

#endif /* KILN_COMPILER_VMFB_FLATBUF_H_ */
