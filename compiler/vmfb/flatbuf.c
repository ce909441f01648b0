/* Table-driven FlatBuffers: descriptor checks, builder, verifier, reader.
 *
 * Builder. Values live in one node array (ref = index + 1): strings, blobs (scalar
 * and struct vectors, aligned byte vectors), offset vectors (strings, tables, union
 * values) and tables (one value cell per slot). Setters check each value against
 * its field descriptor and record the first misuse as the builder's sticky error.
 * finish() then:
 *   1. walks the graph depth-first from the root in slot order (elements in index
 *      order), marking nodes grey/black: a grey node met again is a cycle. Each
 *      node's height (tables on the longest path below it) must stay within
 *      KILN_VMFB_FLATBUF_MAX_DEPTH, so any path the verifier may take fits too.
 *   2. emits nodes in reverse post-order. That order puts every node after all of
 *      its referrers, which is what FlatBuffers' unsigned, forward-only uoffsets
 *      need, and it depends only on the graph, so output is deterministic. Shared
 *      nodes are written once. Offsets are recorded as fix-ups and patched at the
 *      end, once every target has a position.
 *   3. lays out each table as [soffset][fields by descending alignment, then slot],
 *      placed so that the first field sits at the table's largest alignment; its
 *      vtable goes just before it unless an identical one was already written.
 * Every position is relative to the first byte of the buffer, so alignment holds
 * wherever the caller puts it at a multiple of base_alignment.
 *
 * Verifier. Recursive over tables (depth bounded by max_depth <= 1024), with one
 * path frame per level for error messages. All arithmetic is on size_t/uint64_t
 * values already proven to be inside the buffer (which is at most 4 GiB - 8), so
 * nothing overflows. Work is bounded by a visit budget: each table, string and
 * vector visit, and each union-vector element, costs one unit, and per-visit work
 * is bounded by the descriptor, so a DAG of shared subtables cannot explode.
 *
 * Reader. Every accessor recomputes bounds from the buffer length and returns
 * absent/default/empty on any inconsistency; loads go through memcpy-free byte
 * assembly (load_u32 ...) so misaligned buffers are fine.
 */
#include "compiler/vmfb/flatbuf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

/* ---- kinds ---- */

static size_t scalar_size(kiln_vmfb_flatbuf_kind_t kind) {
  switch (kind) {
    case KILN_FLATBUF_BOOL:
    case KILN_FLATBUF_U8:
    case KILN_FLATBUF_I8:
    case KILN_FLATBUF_UNION_TYPE: return 1;
    case KILN_FLATBUF_U16:
    case KILN_FLATBUF_I16: return 2;
    case KILN_FLATBUF_U32:
    case KILN_FLATBUF_I32:
    case KILN_FLATBUF_F32: return 4;
    case KILN_FLATBUF_U64:
    case KILN_FLATBUF_I64:
    case KILN_FLATBUF_F64: return 8;
    default: return 0;
  }
}

static bool is_integer(kiln_vmfb_flatbuf_kind_t kind) {
  return kind >= KILN_FLATBUF_BOOL && kind <= KILN_FLATBUF_I64;
}

static bool is_float(kiln_vmfb_flatbuf_kind_t kind) {
  return kind == KILN_FLATBUF_F32 || kind == KILN_FLATBUF_F64;
}

static bool is_scalar(kiln_vmfb_flatbuf_kind_t kind) { return is_integer(kind) || is_float(kind); }

static bool is_signed(kiln_vmfb_flatbuf_kind_t kind) {
  return kind == KILN_FLATBUF_I8 || kind == KILN_FLATBUF_I16 || kind == KILN_FLATBUF_I32 ||
         kind == KILN_FLATBUF_I64;
}

/* Kinds stored as a uoffset in the table. */
static bool is_offset(kiln_vmfb_flatbuf_kind_t kind) {
  return kind >= KILN_FLATBUF_STRING && kind <= KILN_FLATBUF_VECTOR_UNION && kind != KILN_FLATBUF_UNION_TYPE;
}

static const char *kind_name(kiln_vmfb_flatbuf_kind_t kind) {
  static const char *const names[] = {
      "none",
      "bool",
      "u8",
      "i8",
      "u16",
      "i16",
      "u32",
      "i32",
      "u64",
      "i64",
      "f32",
      "f64",
      "struct",
      "string",
      "table",
      "vector",
      "struct vector",
      "string vector",
      "table vector",
      "union type",
      "union",
      "union type vector",
      "union vector",
  };
  return (size_t)kind < sizeof names / sizeof names[0] ? names[kind] : "unknown kind";
}

/* Size and alignment of a field's inline slot in its table. */
static size_t field_size(const kiln_vmfb_flatbuf_field_desc_t *f) {
  if (f->kind == KILN_FLATBUF_STRUCT) return f->struct_size;
  if (is_offset(f->kind)) return 4;
  return scalar_size(f->kind);
}

static size_t field_align(const kiln_vmfb_flatbuf_field_desc_t *f) {
  if (f->kind == KILN_FLATBUF_STRUCT) return f->struct_align;
  return field_size(f);
}

/* Element size and alignment of a vector field. */
static size_t vector_elem_size(const kiln_vmfb_flatbuf_field_desc_t *f) {
  switch (f->kind) {
    case KILN_FLATBUF_VECTOR: return scalar_size(f->elem_kind);
    case KILN_FLATBUF_VECTOR_STRUCT: return f->struct_size;
    case KILN_FLATBUF_VECTOR_STRING:
    case KILN_FLATBUF_VECTOR_TABLE:
    case KILN_FLATBUF_VECTOR_UNION: return 4;
    case KILN_FLATBUF_VECTOR_UNION_TYPE: return 1;
    default: return 0;
  }
}

static size_t vector_elem_align(const kiln_vmfb_flatbuf_field_desc_t *f) {
  return f->kind == KILN_FLATBUF_VECTOR_STRUCT ? f->struct_align : vector_elem_size(f);
}

static bool is_pow2(size_t x) { return x && !(x & (x - 1)); }

static uint64_t size_mask(size_t size) { return size >= 8 ? UINT64_MAX : (UINT64_C(1) << (8 * size)) - 1; }

/* Whether an unsigned value fits an integer kind. */
static bool uint_fits(kiln_vmfb_flatbuf_kind_t kind, uint64_t v) {
  switch (kind) {
    case KILN_FLATBUF_BOOL: return v <= 1;
    case KILN_FLATBUF_U8:
    case KILN_FLATBUF_UNION_TYPE: return v <= UINT8_MAX;
    case KILN_FLATBUF_I8: return v <= INT8_MAX;
    case KILN_FLATBUF_U16: return v <= UINT16_MAX;
    case KILN_FLATBUF_I16: return v <= INT16_MAX;
    case KILN_FLATBUF_U32: return v <= UINT32_MAX;
    case KILN_FLATBUF_I32: return v <= INT32_MAX;
    case KILN_FLATBUF_U64: return true;
    case KILN_FLATBUF_I64: return v <= INT64_MAX;
    default: return false;
  }
}

static bool int_fits(kiln_vmfb_flatbuf_kind_t kind, int64_t v) {
  if (v >= 0) return uint_fits(kind, (uint64_t)v);
  switch (kind) {
    case KILN_FLATBUF_I8: return v >= INT8_MIN;
    case KILN_FLATBUF_I16: return v >= INT16_MIN;
    case KILN_FLATBUF_I32: return v >= INT32_MIN;
    case KILN_FLATBUF_I64: return true;
    default: return false;
  }
}

/* Little-endian bits of a double as the float kind stores it. */
static uint64_t float_bits(kiln_vmfb_flatbuf_kind_t kind, double value) {
  if (kind == KILN_FLATBUF_F32) {
    float f = (float)value;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
  }
  uint64_t u;
  memcpy(&u, &value, sizeof u);
  return u;
}

static double bits_float(kiln_vmfb_flatbuf_kind_t kind, uint64_t bits) {
  if (kind == KILN_FLATBUF_F32) {
    uint32_t u = (uint32_t)bits;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
  }
  double d;
  memcpy(&d, &bits, sizeof d);
  return d;
}

/* The stored bits of a scalar field's default value. */
static uint64_t default_bits(const kiln_vmfb_flatbuf_field_desc_t *f) {
  if (is_float(f->kind)) return float_bits(f->kind, f->default_float);
  return (uint64_t)f->default_int & size_mask(scalar_size(f->kind));
}

static uint64_t load_n(const uint8_t *p, size_t size) {
  switch (size) {
    case 1: return p[0];
    case 2: return kiln_vmfb_flatbuf_load_u16(p);
    case 4: return kiln_vmfb_flatbuf_load_u32(p);
    case 8: return kiln_vmfb_flatbuf_load_u64(p);
    default: return 0;
  }
}

static void store_n(uint8_t *p, size_t size, uint64_t v) {
  for (size_t i = 0; i < size; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Sign-extends the low `size` bytes of `bits` for signed kinds. */
static int64_t bits_int(kiln_vmfb_flatbuf_kind_t kind, uint64_t bits) {
  size_t size = scalar_size(kind);
  if (is_signed(kind) && size < 8 && (bits >> (8 * size - 1)) & 1) bits |= ~size_mask(size);
  return (int64_t)bits;
}

/* ---- descriptor checks ---- */

typedef struct seen_s {
  const kiln_vmfb_flatbuf_table_desc_t **tables;
  size_t count, capacity;
} seen_t;

static KILN_MUST_USE kiln_status_t check_table(const kiln_vmfb_flatbuf_table_desc_t *t, seen_t *seen);

static KILN_MUST_USE kiln_status_t check_union(const kiln_vmfb_flatbuf_table_desc_t *t,
                                               const kiln_vmfb_flatbuf_field_desc_t *f, seen_t *seen) {
  const kiln_vmfb_flatbuf_union_desc_t *u = f->union_desc;
  if (!u || !u->name || !u->members || u->member_count == 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s.%s: a union field needs a union descriptor with members", t->name, f->name);
  }
  for (uint8_t i = 0; i < u->member_count; i++) {
    if (!u->members[i]) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s.%s: union %s member %u is NULL", t->name, f->name,
                         u->name, i + 1u);
    }
    KILN_RETURN_IF_ERROR(check_table(u->members[i], seen));
  }
  return NULL;
}

static KILN_MUST_USE kiln_status_t check_field(const kiln_vmfb_flatbuf_table_desc_t *t, uint16_t i,
                                               seen_t *seen) {
  const kiln_vmfb_flatbuf_field_desc_t *f = &t->fields[i];
  const char *tn = t->name;
  if (!f->name) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: field %u has no name", tn, i);
  }
  if (f->slot != i) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s.%s: declared slot %u at index %u; fields[] needs one entry per slot, "
                       "in slot order",
                       tn, f->name, f->slot, i);
  }
  if (f->kind <= KILN_FLATBUF_NONE || f->kind > KILN_FLATBUF_VECTOR_UNION) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s.%s: unknown kind %d", tn, f->name, (int)f->kind);
  }
  if (f->required && (!is_offset(f->kind) || f->deprecated)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s.%s: only live string, table, vector and union fields can be required", tn,
                       f->name);
  }
  if (is_integer(f->kind) || f->kind == KILN_FLATBUF_UNION_TYPE) {
    bool ok = f->kind == KILN_FLATBUF_U64 || int_fits(f->kind, f->default_int);
    if (f->kind == KILN_FLATBUF_UNION_TYPE) ok = f->default_int == 0;
    if (!ok || f->default_float != 0) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s.%s: default %" PRId64 " does not fit a %s", tn,
                         f->name, f->default_int, kind_name(f->kind));
    }
  } else if (!is_float(f->kind) && (f->default_int != 0 || f->default_float != 0)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s.%s: a %s field has no default", tn, f->name,
                       kind_name(f->kind));
  }
  switch (f->kind) {
    case KILN_FLATBUF_VECTOR:
      if (!is_scalar(f->elem_kind)) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s.%s: a scalar vector needs a scalar elem_kind",
                           tn, f->name);
      }
      break;
    case KILN_FLATBUF_STRUCT:
    case KILN_FLATBUF_VECTOR_STRUCT:
      if (f->struct_size == 0 || !is_pow2(f->struct_align) || f->struct_align > 256 ||
          f->struct_size % f->struct_align != 0) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "%s.%s: struct size %u / alignment %u: the size must be a nonzero "
                           "multiple of a power-of-two alignment <= 256",
                           tn, f->name, f->struct_size, f->struct_align);
      }
      break;
    case KILN_FLATBUF_TABLE:
    case KILN_FLATBUF_VECTOR_TABLE:
      if (!f->table) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s.%s: a table field needs `table`", tn, f->name);
      }
      KILN_RETURN_IF_ERROR(check_table(f->table, seen));
      break;
    case KILN_FLATBUF_UNION_TYPE:
    case KILN_FLATBUF_VECTOR_UNION_TYPE: {
      kiln_vmfb_flatbuf_kind_t want =
          f->kind == KILN_FLATBUF_UNION_TYPE ? KILN_FLATBUF_UNION : KILN_FLATBUF_VECTOR_UNION;
      const kiln_vmfb_flatbuf_field_desc_t *next =
          (uint32_t)i + 1 < t->field_count ? &t->fields[i + 1] : NULL;
      if (!next || next->kind != want || next->union_desc != f->union_desc ||
          next->deprecated != f->deprecated) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "%s.%s: a %s must be followed by its %s field (same union)", tn, f->name,
                           kind_name(f->kind), kind_name(want));
      }
      KILN_RETURN_IF_ERROR(check_union(t, f, seen));
      break;
    }
    case KILN_FLATBUF_UNION:
    case KILN_FLATBUF_VECTOR_UNION: {
      kiln_vmfb_flatbuf_kind_t want =
          f->kind == KILN_FLATBUF_UNION ? KILN_FLATBUF_UNION_TYPE : KILN_FLATBUF_VECTOR_UNION_TYPE;
      if (i == 0 || t->fields[i - 1].kind != want) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s.%s: a %s must follow its %s field", tn, f->name,
                           kind_name(f->kind), kind_name(want));
      }
      break;
    }
    default: break;
  }
  return NULL;
}

static KILN_MUST_USE kiln_status_t check_table(const kiln_vmfb_flatbuf_table_desc_t *t, seen_t *seen) {
  for (size_t i = 0; i < seen->count; i++) {
    if (seen->tables[i] == t) return NULL; /* recursive schemas are fine */
  }
  if (seen->count == seen->capacity) {
    seen->capacity = seen->capacity ? seen->capacity * 2 : 16;
    seen->tables = kiln_realloc(seen->tables, seen->capacity * sizeof *seen->tables);
  }
  seen->tables[seen->count++] = t;
  if (!t->name) return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "a table descriptor has no name");
  if (t->field_count && !t->fields) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: %u fields but no field array", t->name,
                       t->field_count);
  }
  for (uint16_t i = 0; i < t->field_count; i++) KILN_RETURN_IF_ERROR(check_field(t, i, seen));
  return NULL;
}

kiln_status_t kiln_vmfb_flatbuf_desc_check(const kiln_vmfb_flatbuf_table_desc_t *desc) {
  if (!desc) return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "no table descriptor");
  seen_t seen = {0};
  kiln_status_t status = check_table(desc, &seen);
  kiln_free(seen.tables);
  return status;
}

/* ---- builder ---- */

typedef enum node_type_e {
  NODE_STRING = 1,
  NODE_BLOB,   /* scalar or struct elements, raw little-endian bytes */
  NODE_VECTOR, /* offsets to other nodes */
  NODE_TABLE,
} node_type_t;

typedef struct value_s {
  bool set;
  bool forced;
  uint64_t bits;               /* scalars and union types, little-endian value */
  kiln_vmfb_flatbuf_ref_t ref; /* offset kinds */
  uint8_t *struct_data;        /* STRUCT, owned */
} value_t;

typedef struct node_s {
  node_type_t type;
  bool null_ok;                               /* NODE_VECTOR of union values: 0 where the type is NONE */
  size_t align;                               /* NODE_BLOB: alignment of element 0 */
  size_t elem_size;                           /* NODE_BLOB */
  size_t count;                               /* STRING: bytes; BLOB, VECTOR: elements */
  uint8_t *bytes;                             /* STRING (count + NUL), BLOB (count * elem_size) */
  kiln_vmfb_flatbuf_ref_t *refs;              /* VECTOR */
  const kiln_vmfb_flatbuf_table_desc_t *desc; /* TABLE */
  value_t *values;                            /* TABLE: one per slot */
} node_t;

struct kiln_vmfb_flatbuf_builder_s {
  node_t *nodes;
  size_t count, capacity;
  kiln_status_t error; /* the first misuse, until finish hands it out */
  bool failed;         /* an error was recorded (and maybe handed out) */
};

/* Records the builder's first error; later ones are dropped (they usually follow
 * from the first). */
static void builder_fail(kiln_vmfb_flatbuf_builder_t *b, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void builder_fail(kiln_vmfb_flatbuf_builder_t *b, const char *file, int line, const char *fmt, ...) {
  if (b->failed) return;
  va_list ap;
  va_start(ap, fmt);
  b->error = kiln_status_makev(KILN_STATUS_INVALID_ARGUMENT, file, line, fmt, ap);
  va_end(ap);
  b->failed = true;
}
#define BFAIL(b, ...) builder_fail((b), __FILE__, __LINE__, __VA_ARGS__)

kiln_vmfb_flatbuf_builder_t *kiln_vmfb_flatbuf_builder_create(void) {
  return kiln_calloc(1, sizeof(kiln_vmfb_flatbuf_builder_t));
}

void kiln_vmfb_flatbuf_builder_destroy(kiln_vmfb_flatbuf_builder_t *b) {
  if (!b) return;
  for (size_t i = 0; i < b->count; i++) {
    node_t *n = &b->nodes[i];
    kiln_free(n->bytes);
    kiln_free(n->refs);
    if (n->values) {
      for (uint16_t s = 0; s < n->desc->field_count; s++) kiln_free(n->values[s].struct_data);
      kiln_free(n->values);
    }
  }
  kiln_free(b->nodes);
  kiln_status_free(b->error);
  kiln_free(b);
}

/* Appends a zeroed node; returns its ref (0 after an error or at the ref limit). */
static kiln_vmfb_flatbuf_ref_t node_new(kiln_vmfb_flatbuf_builder_t *b, node_type_t type) {
  if (b->failed) return 0;
  if (b->count >= UINT32_MAX - 1) {
    BFAIL(b, "more than %" PRIu32 " FlatBuffer values in one builder", UINT32_MAX - 1);
    return 0;
  }
  if (b->count == b->capacity) {
    b->capacity = b->capacity ? b->capacity * 2 : 64;
    b->nodes = kiln_realloc(b->nodes, b->capacity * sizeof *b->nodes);
  }
  memset(&b->nodes[b->count], 0, sizeof b->nodes[0]);
  b->nodes[b->count].type = type;
  return (kiln_vmfb_flatbuf_ref_t)++b->count;
}

static node_t *node_get(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t ref) {
  return ref >= 1 && ref <= b->count ? &b->nodes[ref - 1] : NULL;
}

kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_string(kiln_vmfb_flatbuf_builder_t *b, const char *data,
                                                             size_t len) {
  if (b->failed) return 0;
  if (len > UINT32_MAX - 1 || (len && !data)) {
    BFAIL(b, "string of %zu bytes: too long for a FlatBuffer or no data", len);
    return 0;
  }
  kiln_vmfb_flatbuf_ref_t ref = node_new(b, NODE_STRING);
  if (!ref) return 0;
  node_t *n = node_get(b, ref);
  n->count = len;
  n->bytes = kiln_malloc(len + 1);
  if (len) memcpy(n->bytes, data, len);
  n->bytes[len] = 0;
  return ref;
}

kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_str(kiln_vmfb_flatbuf_builder_t *b, const char *s) {
  if (!s) {
    BFAIL(b, "add_str: NULL string");
    return 0;
  }
  return kiln_vmfb_flatbuf_builder_add_string(b, s, strlen(s));
}

static kiln_vmfb_flatbuf_ref_t add_blob(kiln_vmfb_flatbuf_builder_t *b, const void *data, size_t count,
                                        size_t elem_size, size_t align) {
  if (b->failed) return 0;
  if (!is_pow2(align) || align > KILN_VMFB_FLATBUF_MAX_ALIGN) {
    BFAIL(b, "vector alignment %zu is not a power of two up to %d", align, KILN_VMFB_FLATBUF_MAX_ALIGN);
    return 0;
  }
  if (count > UINT32_MAX || count > (SIZE_MAX / 2) / elem_size || (count && !data)) {
    BFAIL(b, "vector of %zu elements of %zu bytes: too large for a FlatBuffer or no data", count, elem_size);
    return 0;
  }
  kiln_vmfb_flatbuf_ref_t ref = node_new(b, NODE_BLOB);
  if (!ref) return 0;
  node_t *n = node_get(b, ref);
  n->count = count;
  n->elem_size = elem_size;
  n->align = align;
  n->bytes = kiln_malloc(count ? count * elem_size : 1);
  if (count) memcpy(n->bytes, data, count * elem_size);
  return ref;
}

kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_bytes(kiln_vmfb_flatbuf_builder_t *b, const void *data,
                                                            size_t len, size_t align) {
  return add_blob(b, data, len, 1, align ? align : 1);
}

kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_scalars(kiln_vmfb_flatbuf_builder_t *b,
                                                              kiln_vmfb_flatbuf_kind_t elem_kind,
                                                              const void *elems, size_t count) {
  if (b->failed) return 0;
  if (!is_scalar(elem_kind)) {
    BFAIL(b, "add_scalars: %s is not a scalar kind", kind_name(elem_kind));
    return 0;
  }
  size_t size = scalar_size(elem_kind);
  kiln_vmfb_flatbuf_ref_t ref = add_blob(b, elems, count, size, size);
  if (!ref) return 0;
  node_t *n = node_get(b, ref);
  /* Re-encode from host order (a no-op on little-endian hosts, bar bool). */
  const uint8_t *src = elems;
  for (size_t i = 0; i < count; i++) {
    uint64_t v = 0;
    if (elem_kind == KILN_FLATBUF_BOOL) {
      bool x;
      memcpy(&x, src + i * sizeof x, sizeof x);
      v = x ? 1 : 0;
    } else if (size == 1) {
      v = src[i];
    } else if (size == 2) {
      uint16_t x;
      memcpy(&x, src + i * size, size);
      v = x;
    } else if (size == 4) {
      uint32_t x;
      memcpy(&x, src + i * size, size);
      v = x;
    } else {
      memcpy(&v, src + i * size, size);
    }
    store_n(n->bytes + i * size, size, v);
  }
  return ref;
}

kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_structs(kiln_vmfb_flatbuf_builder_t *b,
                                                              const void *data, size_t count,
                                                              size_t struct_size, size_t struct_align) {
  if (b->failed) return 0;
  if (struct_size == 0 || !is_pow2(struct_align) || struct_size % struct_align != 0) {
    BFAIL(b, "add_structs: size %zu is not a nonzero multiple of a power-of-two alignment %zu", struct_size,
          struct_align);
    return 0;
  }
  return add_blob(b, data, count, struct_size, struct_align);
}

kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_vector(kiln_vmfb_flatbuf_builder_t *b,
                                                             const kiln_vmfb_flatbuf_ref_t *refs,
                                                             size_t count) {
  if (b->failed) return 0;
  if (count > UINT32_MAX / 4 || (count && !refs)) {
    BFAIL(b, "vector of %zu offsets: too large for a FlatBuffer or no data", count);
    return 0;
  }
  for (size_t i = 0; i < count; i++) {
    node_t *e = node_get(b, refs[i]);
    if (!e || (e->type != NODE_STRING && e->type != NODE_TABLE)) {
      BFAIL(b, "add_vector: element %zu (ref %" PRIu32 ") is not a string or table", i, refs[i]);
      return 0;
    }
  }
  kiln_vmfb_flatbuf_ref_t ref = node_new(b, NODE_VECTOR);
  if (!ref) return 0;
  node_t *n = node_get(b, ref);
  n->count = count;
  n->refs = kiln_malloc(count ? count * sizeof *refs : 1);
  if (count) memcpy(n->refs, refs, count * sizeof *refs);
  return ref;
}

kiln_vmfb_flatbuf_ref_t kiln_vmfb_flatbuf_builder_add_table(kiln_vmfb_flatbuf_builder_t *b,
                                                            const kiln_vmfb_flatbuf_table_desc_t *desc) {
  if (b->failed) return 0;
  if (!desc || (desc->field_count && !desc->fields)) {
    BFAIL(b, "add_table: no table descriptor");
    return 0;
  }
  kiln_vmfb_flatbuf_ref_t ref = node_new(b, NODE_TABLE);
  if (!ref) return 0;
  node_t *n = node_get(b, ref);
  n->desc = desc;
  if (desc->field_count) n->values = kiln_calloc(desc->field_count, sizeof *n->values);
  return ref;
}

/* The value cell of table.slot for a setter named `op`, or NULL (error recorded). */
static value_t *cell(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table, uint16_t slot,
                     const char *op, const kiln_vmfb_flatbuf_field_desc_t **out_field) {
  if (b->failed) return NULL;
  node_t *n = node_get(b, table);
  if (!n || n->type != NODE_TABLE) {
    BFAIL(b, "%s: ref %" PRIu32 " is not a table", op, table);
    return NULL;
  }
  if (slot >= n->desc->field_count) {
    BFAIL(b, "%s: %s has no slot %u (it has %u)", op, n->desc->name, slot, n->desc->field_count);
    return NULL;
  }
  const kiln_vmfb_flatbuf_field_desc_t *f = &n->desc->fields[slot];
  if (f->deprecated) {
    BFAIL(b, "%s: %s.%s is deprecated", op, n->desc->name, f->name);
    return NULL;
  }
  *out_field = f;
  return &n->values[slot];
}

static const char *table_name(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table) {
  return node_get(b, table)->desc->name;
}

#define KIND_MISMATCH(b, table, f, op) \
  BFAIL((b), "%s: %s.%s is a %s field", (op), table_name((b), (table)), (f)->name, kind_name((f)->kind))

void kiln_vmfb_flatbuf_builder_set_uint(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                        uint16_t slot, uint64_t value) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  value_t *v = cell(b, table, slot, "set_uint", &f);
  if (!v) return;
  if (!is_integer(f->kind)) {
    KIND_MISMATCH(b, table, f, "set_uint");
    return;
  }
  if (!uint_fits(f->kind, value)) {
    BFAIL(b, "set_uint: %" PRIu64 " does not fit %s.%s (%s)", value, table_name(b, table), f->name,
          kind_name(f->kind));
    return;
  }
  v->set = true;
  v->bits = value & size_mask(scalar_size(f->kind));
}

void kiln_vmfb_flatbuf_builder_set_int(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                       uint16_t slot, int64_t value) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  value_t *v = cell(b, table, slot, "set_int", &f);
  if (!v) return;
  if (!is_integer(f->kind)) {
    KIND_MISMATCH(b, table, f, "set_int");
    return;
  }
  if (!int_fits(f->kind, value)) {
    BFAIL(b, "set_int: %" PRId64 " does not fit %s.%s (%s)", value, table_name(b, table), f->name,
          kind_name(f->kind));
    return;
  }
  v->set = true;
  v->bits = (uint64_t)value & size_mask(scalar_size(f->kind));
}

void kiln_vmfb_flatbuf_builder_set_bool(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                        uint16_t slot, bool value) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  value_t *v = cell(b, table, slot, "set_bool", &f);
  if (!v) return;
  if (f->kind != KILN_FLATBUF_BOOL) {
    KIND_MISMATCH(b, table, f, "set_bool");
    return;
  }
  v->set = true;
  v->bits = value ? 1 : 0;
}

void kiln_vmfb_flatbuf_builder_set_float(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                         uint16_t slot, double value) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  value_t *v = cell(b, table, slot, "set_float", &f);
  if (!v) return;
  if (!is_float(f->kind)) {
    KIND_MISMATCH(b, table, f, "set_float");
    return;
  }
  v->set = true;
  v->bits = float_bits(f->kind, value);
}

void kiln_vmfb_flatbuf_builder_force(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                     uint16_t slot) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  value_t *v = cell(b, table, slot, "force", &f);
  if (!v) return;
  if (!is_scalar(f->kind)) {
    KIND_MISMATCH(b, table, f, "force");
    return;
  }
  if (!v->set) {
    v->set = true;
    v->bits = default_bits(f);
  }
  v->forced = true;
}

void kiln_vmfb_flatbuf_builder_set_struct(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                          uint16_t slot, const void *data, size_t size) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  value_t *v = cell(b, table, slot, "set_struct", &f);
  if (!v) return;
  if (f->kind != KILN_FLATBUF_STRUCT) {
    KIND_MISMATCH(b, table, f, "set_struct");
    return;
  }
  if (size != f->struct_size || !data) {
    BFAIL(b, "set_struct: %s.%s is %u bytes, got %zu", table_name(b, table), f->name, f->struct_size,
          data ? size : 0);
    return;
  }
  kiln_free(v->struct_data);
  v->struct_data = kiln_memdup(data, size);
  v->set = true;
}

/* Whether node `n` may be the value of offset field `f`; may raise a blob's
 * alignment to the field's element alignment. */
static bool ref_fits(kiln_vmfb_flatbuf_builder_t *b, const kiln_vmfb_flatbuf_field_desc_t *f, node_t *n) {
  switch (f->kind) {
    case KILN_FLATBUF_STRING: return n->type == NODE_STRING;
    case KILN_FLATBUF_TABLE: return n->type == NODE_TABLE && n->desc == f->table;
    case KILN_FLATBUF_VECTOR:
    case KILN_FLATBUF_VECTOR_STRUCT:
      if (n->type != NODE_BLOB || n->elem_size != vector_elem_size(f)) return false;
      if (n->align < vector_elem_align(f)) n->align = vector_elem_align(f);
      return true;
    case KILN_FLATBUF_VECTOR_STRING:
    case KILN_FLATBUF_VECTOR_TABLE:
      if (n->type != NODE_VECTOR || n->null_ok) return false;
      for (size_t i = 0; i < n->count; i++) {
        node_t *e = node_get(b, n->refs[i]);
        if (f->kind == KILN_FLATBUF_VECTOR_STRING ? e->type != NODE_STRING
                                                  : e->type != NODE_TABLE || e->desc != f->table) {
          return false;
        }
      }
      return true;
    default: return false;
  }
}

static const char *node_type_name(const node_t *n) {
  switch (n->type) {
    case NODE_STRING: return "a string";
    case NODE_BLOB: return n->elem_size == 1 ? "a byte vector" : "a scalar or struct vector";
    case NODE_VECTOR: return "a vector of strings or tables";
    case NODE_TABLE: return n->desc->name;
  }
  return "?";
}

void kiln_vmfb_flatbuf_builder_set_ref(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                       uint16_t slot, kiln_vmfb_flatbuf_ref_t value) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  value_t *v = cell(b, table, slot, "set_ref", &f);
  if (!v) return;
  if (!is_offset(f->kind) || f->kind == KILN_FLATBUF_UNION || f->kind == KILN_FLATBUF_VECTOR_UNION ||
      f->kind == KILN_FLATBUF_VECTOR_UNION_TYPE) {
    BFAIL(b, "set_ref: %s.%s is a %s field%s", table_name(b, table), f->name, kind_name(f->kind),
          f->kind == KILN_FLATBUF_UNION || f->kind == KILN_FLATBUF_VECTOR_UNION
              ? " (use set_union / set_union_vector)"
              : "");
    return;
  }
  if (value == 0) { /* clears */
    v->ref = 0;
    return;
  }
  node_t *n = node_get(b, value);
  if (!n) {
    BFAIL(b, "set_ref: %s.%s: ref %" PRIu32 " does not exist", table_name(b, table), f->name, value);
    return;
  }
  if (!ref_fits(b, f, n)) {
    BFAIL(b, "set_ref: %s.%s is a %s field%s%s%s but got %s", table_name(b, table), f->name,
          kind_name(f->kind), f->table ? " of " : "", f->table ? f->table->name : "",
          f->kind == KILN_FLATBUF_VECTOR || f->kind == KILN_FLATBUF_VECTOR_STRUCT ? " (element size differs)"
                                                                                  : "",
          node_type_name(n));
    return;
  }
  v->ref = value;
}

/* Whether `value` is a table of union member `type` (0 only with value 0). */
static bool union_member_fits(kiln_vmfb_flatbuf_builder_t *b, const kiln_vmfb_flatbuf_field_desc_t *f,
                              uint8_t type, kiln_vmfb_flatbuf_ref_t value) {
  if (type == 0) return value == 0;
  if (type > f->union_desc->member_count) return false;
  node_t *n = node_get(b, value);
  return n && n->type == NODE_TABLE && n->desc == f->union_desc->members[type - 1];
}

void kiln_vmfb_flatbuf_builder_set_union(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                         uint16_t slot, uint8_t type, kiln_vmfb_flatbuf_ref_t value) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  value_t *v = cell(b, table, slot, "set_union", &f);
  if (!v) return;
  if (f->kind != KILN_FLATBUF_UNION || slot == 0 || !f->union_desc) {
    KIND_MISMATCH(b, table, f, "set_union");
    return;
  }
  if (!union_member_fits(b, f, type, value)) {
    BFAIL(b, "set_union: %s.%s: type %u with ref %" PRIu32 " is not a member of %s", table_name(b, table),
          f->name, type, value, f->union_desc->name);
    return;
  }
  value_t *tv = v - 1; /* desc_check: the type field is the slot before */
  tv->set = true;
  tv->bits = type;
  v->ref = value;
}

void kiln_vmfb_flatbuf_builder_set_union_vector(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t table,
                                                uint16_t slot, const uint8_t *types,
                                                const kiln_vmfb_flatbuf_ref_t *values, size_t count) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  if (!cell(b, table, slot, "set_union_vector", &f)) return;
  if (f->kind != KILN_FLATBUF_VECTOR_UNION || slot == 0 || !f->union_desc) {
    KIND_MISMATCH(b, table, f, "set_union_vector");
    return;
  }
  if (count > UINT32_MAX / 4 || (count && (!types || !values))) {
    BFAIL(b, "set_union_vector: %s.%s: %zu elements, too many or no data", table_name(b, table), f->name,
          count);
    return;
  }
  for (size_t i = 0; i < count; i++) {
    if (!union_member_fits(b, f, types[i], values[i])) {
      BFAIL(b, "set_union_vector: %s.%s[%zu]: type %u with ref %" PRIu32 " is not a member of %s",
            table_name(b, table), f->name, i, types[i], values[i], f->union_desc->name);
      return;
    }
  }
  kiln_vmfb_flatbuf_ref_t types_ref = add_blob(b, types, count, 1, 1);
  kiln_vmfb_flatbuf_ref_t values_ref = node_new(b, NODE_VECTOR);
  if (!types_ref || !values_ref) return;
  node_t *n = node_get(b, values_ref);
  n->null_ok = true;
  n->count = count;
  n->refs = kiln_malloc(count ? count * sizeof *values : 1);
  if (count) memcpy(n->refs, values, count * sizeof *values);
  /* Node array may have moved: look the cells up again. */
  value_t *cells = node_get(b, table)->values;
  cells[slot - 1].ref = types_ref;
  cells[slot].ref = values_ref;
}

/* -- finish -- */

typedef struct fixup_s {
  size_t at;                   /* position of a uoffset, relative to the buffer start */
  kiln_vmfb_flatbuf_ref_t ref; /* its target */
} fixup_t;

typedef struct vtable_rec_s {
  size_t pos, len;
} vtable_rec_t;

typedef struct emit_s {
  kiln_vmfb_flatbuf_builder_t *b;
  kiln_buf_t *out;
  size_t start; /* out->len on entry: position 0 of the FlatBuffer */
  size_t base_align;
  size_t max_align;               /* the largest alignment any value used */
  uint8_t *state;                 /* per node: 0 unseen, 1 on the DFS path, 2 done */
  uint32_t *height;               /* per node: tables on the longest path below, itself included */
  size_t *pos;                    /* per node: its position once emitted */
  kiln_vmfb_flatbuf_ref_t *order; /* post-order */
  size_t norder;
  fixup_t *fixups;
  size_t nfixups, cfixups;
  vtable_rec_t *vtables;
  size_t nvtables, cvtables;
  uint16_t *scratch; /* per table: present slots, sorted for layout */
  uint16_t *offsets; /* per table: field offset per slot */
  uint8_t *vtable;   /* per table: the vtable being built */
} emit_t;

/* Whether table value `v` of field `f` is written. */
static bool value_present(const kiln_vmfb_flatbuf_field_desc_t *f, const value_t *v) {
  if (f->deprecated) return false;
  if (f->kind == KILN_FLATBUF_STRUCT) return v->set && v->struct_data;
  if (is_offset(f->kind)) return v->ref != 0;
  return v->set && (v->forced || v->bits != default_bits(f));
}

static KILN_MUST_USE kiln_status_t visit(emit_t *e, kiln_vmfb_flatbuf_ref_t ref, unsigned depth) {
  size_t idx = ref - 1;
  node_t *n = &e->b->nodes[idx];
  if (e->state[idx] == 2) return NULL;
  if (e->state[idx] == 1) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "FlatBuffer values form a cycle through %s (ref %" PRIu32 ")", node_type_name(n), ref);
  }
  /* Paths alternate table -> (vector ->) table, so this bounds the tables too. */
  if (depth > 2u * KILN_VMFB_FLATBUF_MAX_DEPTH + 2) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "FlatBuffer tables nest deeper than %d",
                       KILN_VMFB_FLATBUF_MAX_DEPTH);
  }
  e->state[idx] = 1;
  uint32_t h = 0;
  if (n->type == NODE_TABLE) {
    const kiln_vmfb_flatbuf_table_desc_t *d = n->desc;
    for (uint16_t s = 0; s < d->field_count; s++) {
      const kiln_vmfb_flatbuf_field_desc_t *f = &d->fields[s];
      const value_t *v = &n->values[s];
      if (f->required && v->ref == 0) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s.%s is required but was not set", d->name,
                           f->name);
      }
      if (is_offset(f->kind) && v->ref && !f->deprecated) {
        KILN_RETURN_IF_ERROR(visit(e, v->ref, depth + 1));
        if (e->height[v->ref - 1] > h) h = e->height[v->ref - 1];
      }
    }
    h++;
    if (h > KILN_VMFB_FLATBUF_MAX_DEPTH) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "FlatBuffer tables nest %" PRIu32 " deep below a %s; the limit is %d", h, d->name,
                         KILN_VMFB_FLATBUF_MAX_DEPTH);
    }
  } else if (n->type == NODE_VECTOR) {
    for (size_t i = 0; i < n->count; i++) {
      if (!n->refs[i]) continue;
      KILN_RETURN_IF_ERROR(visit(e, n->refs[i], depth + 1));
      if (e->height[n->refs[i] - 1] > h) h = e->height[n->refs[i] - 1];
    }
  }
  e->height[idx] = h;
  e->state[idx] = 2;
  e->order[e->norder++] = ref;
  return NULL;
}

static size_t rel(const emit_t *e) { return e->out->len - e->start; }

static void append_zeros(emit_t *e, size_t n) {
  static const uint8_t zeros[256];
  while (n) {
    size_t k = n < sizeof zeros ? n : sizeof zeros;
    kiln_buf_append(e->out, zeros, k);
    n -= k;
  }
}

/* Pads so that (position + phase) is a multiple of `align`. */
static KILN_MUST_USE kiln_status_t pad_to(emit_t *e, size_t align, size_t phase) {
  if (align > e->base_align) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "a FlatBuffer value needs %zu-byte alignment but the buffer is only "
                       "placed at a multiple of %zu (raise base_alignment)",
                       align, e->base_align);
  }
  if (align > e->max_align) e->max_align = align;
  size_t r = (rel(e) + phase) & (align - 1);
  if (r) append_zeros(e, align - r);
  return NULL;
}

static void put_u32(emit_t *e, uint32_t v) {
  uint8_t b[4];
  kiln_vmfb_flatbuf_store_u32(b, v);
  kiln_buf_append(e->out, b, 4);
}

static uint8_t *out_at(emit_t *e, size_t pos) { return (uint8_t *)e->out->data + e->start + pos; }

static void add_fixup(emit_t *e, size_t pos, kiln_vmfb_flatbuf_ref_t ref) {
  if (e->nfixups == e->cfixups) {
    e->cfixups = e->cfixups ? e->cfixups * 2 : 64;
    e->fixups = kiln_realloc(e->fixups, e->cfixups * sizeof *e->fixups);
  }
  e->fixups[e->nfixups++] = (fixup_t){pos, ref};
}

static KILN_MUST_USE kiln_status_t emit_table(emit_t *e, const node_t *n, size_t *out_pos) {
  const kiln_vmfb_flatbuf_table_desc_t *d = n->desc;
  size_t npresent = 0, table_align = 4;
  int32_t max_slot = -1;
  for (uint16_t s = 0; s < d->field_count; s++) {
    if (!value_present(&d->fields[s], &n->values[s])) continue;
    /* Insertion sort by descending alignment; equal alignments keep slot order. */
    size_t a = field_align(&d->fields[s]), j = npresent++;
    while (j > 0 && field_align(&d->fields[e->scratch[j - 1]]) < a) {
      e->scratch[j] = e->scratch[j - 1];
      j--;
    }
    e->scratch[j] = s;
    if (a > table_align) table_align = a;
    max_slot = s;
  }
  /* Offsets from the table start, which sits 4 bytes before a table_align boundary. */
  size_t off = 4;
  for (size_t k = 0; k < npresent; k++) {
    const kiln_vmfb_flatbuf_field_desc_t *f = &d->fields[e->scratch[k]];
    size_t a = field_align(f);
    off = 4 + ((off - 4 + a - 1) & ~(a - 1));
    e->offsets[e->scratch[k]] = (uint16_t)off;
    off += field_size(f);
    if (off > UINT16_MAX) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "a %s would take %zu bytes inline; tables are limited to 65535", d->name, off);
    }
  }
  size_t tsize = off;
  size_t vsize = 4 + 2 * (size_t)(max_slot + 1);
  uint8_t *vt = e->vtable;
  kiln_vmfb_flatbuf_store_u16(vt, (uint16_t)vsize);
  kiln_vmfb_flatbuf_store_u16(vt + 2, (uint16_t)tsize);
  for (int32_t s = 0; s <= max_slot; s++) {
    bool present = value_present(&d->fields[s], &n->values[s]);
    kiln_vmfb_flatbuf_store_u16(vt + 4 + 2 * s, present ? e->offsets[s] : 0);
  }
  size_t vpos = SIZE_MAX;
  for (size_t k = 0; k < e->nvtables; k++) {
    if (e->vtables[k].len == vsize && !memcmp(out_at(e, e->vtables[k].pos), vt, vsize)) {
      vpos = e->vtables[k].pos;
      break;
    }
  }
  if (vpos == SIZE_MAX) {
    KILN_RETURN_IF_ERROR(pad_to(e, 2, 0));
    vpos = rel(e);
    kiln_buf_append(e->out, vt, vsize);
    if (e->nvtables == e->cvtables) {
      e->cvtables = e->cvtables ? e->cvtables * 2 : 16;
      e->vtables = kiln_realloc(e->vtables, e->cvtables * sizeof *e->vtables);
    }
    e->vtables[e->nvtables++] = (vtable_rec_t){vpos, vsize};
  }
  KILN_RETURN_IF_ERROR(pad_to(e, table_align, 4));
  size_t tpos = rel(e);
  if (tpos - vpos > INT32_MAX) {
    return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                       "FlatBuffer exceeds 2 GiB, the limit of its signed vtable offsets");
  }
  append_zeros(e, tsize);
  kiln_vmfb_flatbuf_store_u32(out_at(e, tpos), (uint32_t)(int32_t)(tpos - vpos));
  for (size_t k = 0; k < npresent; k++) {
    uint16_t s = e->scratch[k];
    const kiln_vmfb_flatbuf_field_desc_t *f = &d->fields[s];
    const value_t *v = &n->values[s];
    size_t fpos = tpos + e->offsets[s];
    if (f->kind == KILN_FLATBUF_STRUCT) {
      memcpy(out_at(e, fpos), v->struct_data, f->struct_size);
    } else if (is_offset(f->kind)) {
      add_fixup(e, fpos, v->ref);
    } else {
      store_n(out_at(e, fpos), field_size(f), v->bits);
    }
  }
  *out_pos = tpos;
  return NULL;
}

static KILN_MUST_USE kiln_status_t emit_node(emit_t *e, kiln_vmfb_flatbuf_ref_t ref) {
  const node_t *n = &e->b->nodes[ref - 1];
  size_t pos = 0;
  switch (n->type) {
    case NODE_STRING:
      KILN_RETURN_IF_ERROR(pad_to(e, 4, 0));
      pos = rel(e);
      put_u32(e, (uint32_t)n->count);
      kiln_buf_append(e->out, n->bytes, n->count + 1);
      break;
    case NODE_BLOB:
      /* The count sits right before element 0, which gets the alignment. */
      KILN_RETURN_IF_ERROR(pad_to(e, n->align > 4 ? n->align : 4, 4));
      pos = rel(e);
      put_u32(e, (uint32_t)n->count);
      kiln_buf_append(e->out, n->bytes, n->count * n->elem_size);
      break;
    case NODE_VECTOR:
      KILN_RETURN_IF_ERROR(pad_to(e, 4, 0));
      pos = rel(e);
      put_u32(e, (uint32_t)n->count);
      append_zeros(e, 4 * n->count);
      for (size_t i = 0; i < n->count; i++) {
        if (n->refs[i]) add_fixup(e, pos + 4 + 4 * i, n->refs[i]);
      }
      break;
    case NODE_TABLE: KILN_RETURN_IF_ERROR(emit_table(e, n, &pos)); break;
  }
  e->pos[ref - 1] = pos;
  return NULL;
}

static KILN_MUST_USE kiln_status_t finish(emit_t *e, kiln_vmfb_flatbuf_ref_t root,
                                          const kiln_vmfb_flatbuf_finish_options_t *o) {
  kiln_vmfb_flatbuf_builder_t *b = e->b;
  KILN_RETURN_IF_ERROR(visit(e, root, 0));
  size_t max_fields = 1;
  for (size_t i = 0; i < e->norder; i++) {
    const node_t *n = &b->nodes[e->order[i] - 1];
    if (n->type == NODE_TABLE && n->desc->field_count > max_fields) {
      max_fields = n->desc->field_count;
    }
  }
  e->scratch = kiln_malloc(max_fields * sizeof *e->scratch);
  e->offsets = kiln_malloc(max_fields * sizeof *e->offsets);
  e->vtable = kiln_malloc(4 + 2 * max_fields);

  if (o->size_prefixed) put_u32(e, 0);
  size_t root_at = rel(e);
  put_u32(e, 0);
  if (o->identifier) kiln_buf_append(e->out, o->identifier, 4);
  for (size_t i = e->norder; i-- > 0;) KILN_RETURN_IF_ERROR(emit_node(e, e->order[i]));
  KILN_RETURN_IF_ERROR(pad_to(e, e->max_align, 0));
  if (rel(e) > INT32_MAX) {
    return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                       "FlatBuffer would take %zu bytes; the format's limit is 2 GiB", rel(e));
  }
  add_fixup(e, root_at, root);
  for (size_t i = 0; i < e->nfixups; i++) {
    size_t target = e->pos[e->fixups[i].ref - 1];
    if (target <= e->fixups[i].at) { /* reverse post-order makes this impossible */
      return KILN_STATUS(KILN_STATUS_INTERNAL, "FlatBuffer builder laid out a backward offset");
    }
    kiln_vmfb_flatbuf_store_u32(out_at(e, e->fixups[i].at), (uint32_t)(target - e->fixups[i].at));
  }
  if (o->size_prefixed) kiln_vmfb_flatbuf_store_u32(out_at(e, 0), (uint32_t)(rel(e) - 4));
  return NULL;
}

kiln_status_t kiln_vmfb_flatbuf_builder_finish(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t root,
                                               const kiln_vmfb_flatbuf_finish_options_t *options,
                                               kiln_buf_t *out) {
  if (b->error) {
    kiln_status_t s = b->error;
    b->error = NULL;
    return s;
  }
  if (b->failed) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "the FlatBuffer builder failed earlier; its error was already returned");
  }
  kiln_vmfb_flatbuf_finish_options_t o = options ? *options : (kiln_vmfb_flatbuf_finish_options_t){0};
  if (!o.base_alignment) o.base_alignment = 16;
  if (!is_pow2(o.base_alignment) || o.base_alignment < 4 || o.base_alignment > KILN_VMFB_FLATBUF_MAX_ALIGN) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "base_alignment %zu is not a power of two in 4..%d",
                       o.base_alignment, KILN_VMFB_FLATBUF_MAX_ALIGN);
  }
  if (o.identifier && strlen(o.identifier) != 4) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "file identifier \"%s\" is not 4 characters",
                       o.identifier);
  }
  node_t *r = node_get(b, root);
  if (!r || r->type != NODE_TABLE) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "finish: root ref %" PRIu32 " is not a table", root);
  }
  emit_t e = {.b = b, .out = out, .start = out->len, .base_align = o.base_alignment, .max_align = 4};
  e.state = kiln_calloc(b->count, 1);
  e.height = kiln_calloc(b->count, sizeof *e.height);
  e.pos = kiln_calloc(b->count, sizeof *e.pos);
  e.order = kiln_malloc(b->count * sizeof *e.order);
  kiln_status_t status = finish(&e, root, &o);
  if (status) {
    out->len = e.start;
    if (out->data) out->data[out->len] = '\0';
  }
  kiln_free(e.state);
  kiln_free(e.height);
  kiln_free(e.pos);
  kiln_free(e.order);
  kiln_free(e.fixups);
  kiln_free(e.vtables);
  kiln_free(e.scratch);
  kiln_free(e.offsets);
  kiln_free(e.vtable);
  return status;
}

/* ---- verifier ---- */

enum { VERIFY_MAX_DEPTH_LIMIT = 1024 };

typedef struct vframe_s {
  const kiln_vmfb_flatbuf_field_desc_t *field;
  size_t index;
  bool indexed;
} vframe_t;

typedef struct verifier_s {
  const uint8_t *p;
  size_t end;  /* bytes that belong to the FlatBuffer */
  size_t body; /* first byte after the size prefix */
  const kiln_vmfb_flatbuf_table_desc_t *root;
  uint32_t max_depth;
  uint64_t budget, max_objects;
  vframe_t *frames;
  size_t nframes;
  kiln_status_code_t code;
} verifier_t;

static KILN_MUST_USE kiln_status_t verify_fail(verifier_t *v, const char *file, int line, const char *fmt,
                                               ...) __attribute__((format(printf, 4, 5)));
static KILN_MUST_USE kiln_status_t verify_fail(verifier_t *v, const char *file, int line, const char *fmt,
                                               ...) {
  kiln_buf_t msg;
  kiln_buf_init(&msg);
  kiln_buf_append_str(&msg, v->root->name);
  for (size_t i = 0; i < v->nframes; i++) {
    kiln_buf_appendf(&msg, ".%s", v->frames[i].field->name);
    if (v->frames[i].indexed) kiln_buf_appendf(&msg, "[%zu]", v->frames[i].index);
  }
  kiln_buf_append_str(&msg, ": ");
  va_list ap;
  va_start(ap, fmt);
  kiln_buf_appendvf(&msg, fmt, ap);
  va_end(ap);
  kiln_status_t s = kiln_status_make(v->code, file, line, "%s", msg.data);
  kiln_buf_deinit(&msg);
  return s;
}
#define VFAIL(v, ...) verify_fail((v), __FILE__, __LINE__, __VA_ARGS__)

static KILN_MUST_USE kiln_status_t spend(verifier_t *v) {
  if (v->budget == 0) {
    return VFAIL(v,
                 "more than %" PRIu64
                 " tables, strings and vectors visited (shared "
                 "subtables multiply visits; raise max_objects if this buffer is legitimate)",
                 v->max_objects);
  }
  v->budget--;
  return NULL;
}

/* Follows the uoffset at `at` (which the caller proved in bounds): the target must
 * be nonzero, 4-aligned and leave room for a u32. */
static KILN_MUST_USE kiln_status_t follow(verifier_t *v, size_t at, size_t *out_target) {
  uint32_t u = kiln_vmfb_flatbuf_load_u32(v->p + at);
  if (u == 0) return VFAIL(v, "null offset at %zu", at);
  uint64_t target = (uint64_t)at + u;
  if (target + 4 > v->end) {
    return VFAIL(v, "offset at %zu points to %" PRIu64 ", past the end of the buffer (%zu)", at, target,
                 v->end);
  }
  if (target % 4) return VFAIL(v, "offset at %zu points to misaligned %" PRIu64, at, target);
  *out_target = (size_t)target;
  return NULL;
}

static KILN_MUST_USE kiln_status_t verify_string_at(verifier_t *v, size_t at) {
  size_t s = 0; /* set by follow() on success; GCC -O3 cannot tell */
  KILN_RETURN_IF_ERROR(follow(v, at, &s));
  KILN_RETURN_IF_ERROR(spend(v));
  uint32_t n = kiln_vmfb_flatbuf_load_u32(v->p + s);
  size_t avail = v->end - s - 4;
  if (n >= avail) {
    return VFAIL(v, "string extends past the end of the buffer (offset %zu, length %" PRIu32 ", buffer %zu)",
                 s, n, v->end);
  }
  if (v->p[s + 4 + n] != 0) {
    return VFAIL(v, "string is not NUL-terminated (offset %zu, length %" PRIu32 ")", s, n);
  }
  return NULL;
}

/* Checks the vector at the uoffset `at`: header alignment, element alignment, count
 * within the buffer. */
static KILN_MUST_USE kiln_status_t verify_vector_at(verifier_t *v, size_t at, size_t elem_size,
                                                    size_t elem_align, size_t *out_pos, size_t *out_count) {
  size_t s = 0; /* likewise */
  KILN_RETURN_IF_ERROR(follow(v, at, &s));
  KILN_RETURN_IF_ERROR(spend(v));
  if (elem_align > 4 && (s + 4) % elem_align) {
    return VFAIL(v, "vector elements at %zu are not %zu-byte aligned", s + 4, elem_align);
  }
  uint32_t n = kiln_vmfb_flatbuf_load_u32(v->p + s);
  size_t avail = v->end - s - 4;
  if (n > avail / elem_size) {
    char unit[32] = "";
    if (elem_size != 1) snprintf(unit, sizeof unit, " x %zu bytes", elem_size);
    return VFAIL(v,
                 "vector extends past the end of the buffer (offset %zu, length %" PRIu32 "%s, buffer %zu)",
                 s, n, unit, v->end);
  }
  *out_pos = s + 4;
  *out_count = n;
  return NULL;
}

static KILN_MUST_USE kiln_status_t verify_table(verifier_t *v, size_t t,
                                                const kiln_vmfb_flatbuf_table_desc_t *d, uint32_t depth);

static KILN_MUST_USE kiln_status_t verify_table_at(verifier_t *v, size_t at,
                                                   const kiln_vmfb_flatbuf_table_desc_t *d, uint32_t depth) {
  size_t t = 0; /* likewise */
  KILN_RETURN_IF_ERROR(follow(v, at, &t));
  return verify_table(v, t, d, depth);
}

static const char *member_name(const kiln_vmfb_flatbuf_union_desc_t *u, uint8_t type) {
  return type >= 1 && type <= u->member_count ? u->members[type - 1]->name : "unknown";
}

static KILN_MUST_USE kiln_status_t verify_union_vector(verifier_t *v, const kiln_vmfb_flatbuf_field_desc_t *f,
                                                       size_t fpos, size_t types_pos, size_t types_count,
                                                       bool types_present, uint32_t depth) {
  vframe_t *fr = &v->frames[v->nframes - 1];
  if (!fpos) {
    if (types_present) return VFAIL(v, "union types are present but the values are missing");
    return NULL;
  }
  if (!types_present) return VFAIL(v, "union values are present but their types are missing");
  size_t pos, count;
  KILN_RETURN_IF_ERROR(verify_vector_at(v, fpos, 4, 4, &pos, &count));
  if (count != types_count) {
    return VFAIL(v, "%zu union values but %zu types", count, types_count);
  }
  const kiln_vmfb_flatbuf_union_desc_t *u = f->union_desc;
  for (size_t i = 0; i < count; i++) {
    fr->indexed = true;
    fr->index = i;
    KILN_RETURN_IF_ERROR(spend(v));
    uint8_t type = v->p[types_pos + i];
    uint32_t off = kiln_vmfb_flatbuf_load_u32(v->p + pos + 4 * i);
    if (type > u->member_count) {
      return VFAIL(v, "unknown union type %u (%s has %u members)", type, u->name, u->member_count);
    }
    if (type == 0 && off != 0) return VFAIL(v, "union value present but its type is NONE");
    if (type != 0 && off == 0) {
      return VFAIL(v, "union type %u (%s) without a value", type, member_name(u, type));
    }
    if (type) {
      KILN_RETURN_IF_ERROR(verify_table_at(v, pos + 4 * i, u->members[type - 1], depth + 1));
    }
  }
  fr->indexed = false;
  return NULL;
}

static KILN_MUST_USE kiln_status_t verify_table(verifier_t *v, size_t t,
                                                const kiln_vmfb_flatbuf_table_desc_t *d, uint32_t depth) {
  if (depth > v->max_depth) return VFAIL(v, "tables nest deeper than %" PRIu32, v->max_depth);
  KILN_RETURN_IF_ERROR(spend(v));
  int32_t so = (int32_t)kiln_vmfb_flatbuf_load_u32(v->p + t);
  int64_t vt = (int64_t)t - so;
  if (vt < (int64_t)v->body || vt + 4 > (int64_t)v->end) {
    return VFAIL(v, "%s table at %zu has its vtable at %" PRId64 ", outside the buffer (%zu..%zu)", d->name,
                 t, vt, v->body, v->end);
  }
  if (vt % 2) {
    return VFAIL(v, "%s table at %zu has a misaligned vtable (%" PRId64 ")", d->name, t, vt);
  }
  size_t vpos = (size_t)vt;
  size_t vsize = kiln_vmfb_flatbuf_load_u16(v->p + vpos);
  size_t tsize = kiln_vmfb_flatbuf_load_u16(v->p + vpos + 2);
  if (vsize < 4 || vsize % 2 || vsize > v->end - vpos) {
    return VFAIL(v,
                 "%s vtable at %zu has a bad size %zu (must be even, >= 4 and within the "
                 "buffer of %zu)",
                 d->name, vpos, vsize, v->end);
  }
  if (tsize < 4 || tsize > v->end - t) {
    return VFAIL(v, "%s table at %zu claims %zu inline bytes (at least 4, buffer %zu)", d->name, t, tsize,
                 v->end);
  }
  if (v->nframes >= (size_t)v->max_depth + 1) { /* cannot happen: one frame per level */
    return VFAIL(v, "verifier path overflow");
  }
  vframe_t *fr = &v->frames[v->nframes++];
  uint8_t union_type = 0;
  size_t types_pos = 0, types_count = 0;
  bool types_present = false;
  kiln_status_t status = NULL;
  for (uint16_t i = 0; i < d->field_count && !status; i++) {
    const kiln_vmfb_flatbuf_field_desc_t *f = &d->fields[i];
    *fr = (vframe_t){.field = f};
    if (f->deprecated) continue;
    /* Slots past the vtable's end are absent (older writers). */
    size_t entry = 4 + 2 * (size_t)i;
    size_t vo = entry + 2 <= vsize ? kiln_vmfb_flatbuf_load_u16(v->p + vpos + entry) : 0;
    size_t fpos = 0;
    if (vo) {
      size_t size = field_size(f), align = field_align(f);
      if (vo < 4 || vo + size > tsize) {
        status = VFAIL(v, "field at table offset %zu (%zu bytes) is outside its table (%zu bytes)", vo, size,
                       tsize);
        break;
      }
      fpos = t + vo;
      if (fpos % align) {
        status = VFAIL(v, "field at %zu is not %zu-byte aligned", fpos, align);
        break;
      }
    } else if (f->required) {
      status = VFAIL(v, "required field is missing");
      break;
    }
    switch (f->kind) {
      case KILN_FLATBUF_UNION_TYPE:
        union_type = fpos ? v->p[fpos] : 0;
        if (union_type > f->union_desc->member_count) {
          status = VFAIL(v, "unknown union type %u (%s has %u members)", union_type, f->union_desc->name,
                         f->union_desc->member_count);
        }
        break;
      case KILN_FLATBUF_UNION:
        if (union_type == 0 && fpos) {
          status = VFAIL(v, "union value present but its type is NONE");
        } else if (union_type != 0 && !fpos) {
          status = VFAIL(v, "union type %u (%s) without a value", union_type,
                         member_name(f->union_desc, union_type));
        } else if (fpos) {
          status = verify_table_at(v, fpos, f->union_desc->members[union_type - 1], depth + 1);
        }
        break;
      case KILN_FLATBUF_STRING:
        if (fpos) status = verify_string_at(v, fpos);
        break;
      case KILN_FLATBUF_TABLE:
        if (fpos) status = verify_table_at(v, fpos, f->table, depth + 1);
        break;
      case KILN_FLATBUF_VECTOR:
      case KILN_FLATBUF_VECTOR_STRUCT:
      case KILN_FLATBUF_VECTOR_UNION_TYPE: {
        size_t pos = 0, count = 0;
        if (fpos) {
          status = verify_vector_at(v, fpos, vector_elem_size(f), vector_elem_align(f), &pos, &count);
        }
        if (f->kind == KILN_FLATBUF_VECTOR_UNION_TYPE) {
          types_present = fpos != 0;
          types_pos = pos;
          types_count = count;
        }
        break;
      }
      case KILN_FLATBUF_VECTOR_STRING:
      case KILN_FLATBUF_VECTOR_TABLE: {
        size_t pos, count;
        if (!fpos) break;
        status = verify_vector_at(v, fpos, 4, 4, &pos, &count);
        for (size_t k = 0; k < count && !status; k++) {
          fr->indexed = true;
          fr->index = k;
          status = f->kind == KILN_FLATBUF_VECTOR_STRING
                       ? verify_string_at(v, pos + 4 * k)
                       : verify_table_at(v, pos + 4 * k, f->table, depth + 1);
        }
        if (!status) fr->indexed = false;
        break;
      }
      case KILN_FLATBUF_VECTOR_UNION:
        status = verify_union_vector(v, f, fpos, types_pos, types_count, types_present, depth);
        break;
      default: /* scalars and structs: in bounds and aligned is all there is */ break;
    }
  }
  if (!status) v->nframes--;
  return status;
}

static void format_identifier(const uint8_t *id, char out[17]) {
  size_t k = 0;
  for (int i = 0; i < 4; i++) {
    if (id[i] >= 0x20 && id[i] < 0x7f && id[i] != '"' && id[i] != '\\') {
      out[k++] = (char)id[i];
    } else {
      k += (size_t)snprintf(out + k, 5, "\\x%02x", id[i]);
    }
  }
  out[k] = '\0';
}

kiln_status_t kiln_vmfb_flatbuf_verify(const void *data, size_t len,
                                       const kiln_vmfb_flatbuf_verify_options_t *options,
                                       const kiln_vmfb_flatbuf_table_desc_t *desc) {
  kiln_vmfb_flatbuf_verify_options_t o = options ? *options : (kiln_vmfb_flatbuf_verify_options_t){0};
  kiln_status_code_t code = o.error_code ? o.error_code : KILN_STATUS_INVALID_ARGUMENT;
  if (!desc) return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "verify: no table descriptor");
  if (!data && len) return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "verify: no data");
  if (o.max_depth > VERIFY_MAX_DEPTH_LIMIT) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "verify: max_depth %" PRIu32 " is above %d", o.max_depth,
                       VERIFY_MAX_DEPTH_LIMIT);
  }
  if (o.identifier && strlen(o.identifier) != 4) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "verify: file identifier \"%s\" is not 4 characters",
                       o.identifier);
  }
  verifier_t v = {.p = data, .end = len, .root = desc, .code = code};
  v.max_depth = o.max_depth ? o.max_depth : KILN_VMFB_FLATBUF_MAX_DEPTH;
  v.max_objects = o.max_objects ? o.max_objects : 1024 + (uint64_t)len / 2;
  v.budget = v.max_objects;
  /* Offsets are 32-bit; 8 bytes of headroom keep every field-end sum in range. */
  if (len > (size_t)UINT32_MAX - 8) {
    return VFAIL(&v, "buffer of %zu bytes is larger than a FlatBuffer can address", len);
  }
  if (o.size_prefixed) {
    if (len < 4) return VFAIL(&v, "buffer of %zu bytes has no room for its size prefix", len);
    uint32_t size = kiln_vmfb_flatbuf_load_u32(v.p);
    if (size > len - 4) {
      return VFAIL(&v, "size prefix says %" PRIu32 " bytes but only %zu follow", size, len - 4);
    }
    v.body = 4;
    v.end = 4 + (size_t)size;
  }
  /* Room for the root offset and an identifier, present or not (as flatcc asks). */
  if (v.end - v.body < 8) {
    return VFAIL(&v, "buffer of %zu bytes is too small for a FlatBuffer header (8 bytes)", v.end - v.body);
  }
  if (o.identifier && memcmp(v.p + v.body + 4, o.identifier, 4) != 0) {
    char got[17];
    format_identifier(v.p + v.body + 4, got);
    return VFAIL(&v, "file identifier is \"%s\", expected \"%s\"", got, o.identifier);
  }
  v.frames = kiln_malloc(((size_t)v.max_depth + 1) * sizeof *v.frames);
  kiln_status_t status = verify_table_at(&v, v.body, desc, 1);
  kiln_free(v.frames);
  return status;
}

/* ---- reader ---- */

/* Position of the uoffset target at `at`, or 0 when it is not within len. */
static size_t rd_follow(const uint8_t *p, size_t len, size_t at) {
  if (len < 4 || at > len - 4) return 0;
  uint32_t u = kiln_vmfb_flatbuf_load_u32(p + at);
  if (u == 0) return 0;
  uint64_t target = (uint64_t)at + u;
  if (target + 4 > len) return 0;
  return (size_t)target;
}

static const kiln_vmfb_flatbuf_field_desc_t *rd_desc(kiln_vmfb_flatbuf_table_t t, uint16_t slot) {
  if (!t.data || !t.desc || slot >= t.desc->field_count) return NULL;
  const kiln_vmfb_flatbuf_field_desc_t *f = &t.desc->fields[slot];
  return f->deprecated ? NULL : f;
}

/* Position of slot's `size` inline bytes, or 0 when absent or out of bounds. */
static size_t rd_field(kiln_vmfb_flatbuf_table_t t, uint16_t slot, size_t size) {
  if (!t.data || t.len < 4 || t.pos > t.len - 4) return 0;
  int32_t so = (int32_t)kiln_vmfb_flatbuf_load_u32(t.data + t.pos);
  int64_t vt = (int64_t)t.pos - so;
  if (vt < 0 || vt + 4 > (int64_t)t.len) return 0;
  size_t vpos = (size_t)vt;
  size_t vsize = kiln_vmfb_flatbuf_load_u16(t.data + vpos);
  size_t entry = 4 + 2 * (size_t)slot;
  if (entry + 2 > vsize || vpos + entry + 2 > t.len) return 0;
  size_t vo = kiln_vmfb_flatbuf_load_u16(t.data + vpos + entry);
  size_t tsize = kiln_vmfb_flatbuf_load_u16(t.data + vpos + 2);
  if (vo < 4 || vo + size > tsize || t.pos + vo + size > t.len) return 0;
  return t.pos + vo;
}

static const char *rd_string(const uint8_t *p, size_t len, size_t s, size_t *out_len) {
  if (out_len) *out_len = 0;
  if (!s) return NULL;
  uint32_t n = kiln_vmfb_flatbuf_load_u32(p + s);
  if (n >= len - s - 4 || p[s + 4 + n] != 0) return NULL;
  if (out_len) *out_len = n;
  return (const char *)p + s + 4;
}

kiln_vmfb_flatbuf_table_t kiln_vmfb_flatbuf_root(const void *data, size_t len, bool size_prefixed,
                                                 const kiln_vmfb_flatbuf_table_desc_t *desc) {
  kiln_vmfb_flatbuf_table_t none = {0};
  const uint8_t *p = data;
  size_t body = 0;
  if (!p || !desc) return none;
  if (size_prefixed) {
    if (len < 4) return none;
    uint32_t size = kiln_vmfb_flatbuf_load_u32(p);
    if (size > len - 4) return none;
    len = 4 + (size_t)size;
    body = 4;
  }
  size_t t = rd_follow(p, len, body);
  if (!t) return none;
  return (kiln_vmfb_flatbuf_table_t){.data = p, .len = len, .pos = t, .desc = desc};
}

bool kiln_vmfb_flatbuf_table_exists(kiln_vmfb_flatbuf_table_t t) { return t.data != NULL; }

bool kiln_vmfb_flatbuf_table_has(kiln_vmfb_flatbuf_table_t t, uint16_t slot) {
  const kiln_vmfb_flatbuf_field_desc_t *f = rd_desc(t, slot);
  return f && rd_field(t, slot, field_size(f)) != 0;
}

/* Raw little-endian bits of an integer or float field, or its default. */
static bool rd_scalar(kiln_vmfb_flatbuf_table_t t, uint16_t slot, bool want_float,
                      const kiln_vmfb_flatbuf_field_desc_t **out_f, uint64_t *out_bits) {
  const kiln_vmfb_flatbuf_field_desc_t *f = rd_desc(t, slot);
  if (!f) return false;
  bool integer = is_integer(f->kind) || f->kind == KILN_FLATBUF_UNION_TYPE;
  if (want_float ? !is_float(f->kind) : !integer) return false;
  size_t size = scalar_size(f->kind);
  size_t pos = rd_field(t, slot, size);
  *out_bits = pos ? load_n(t.data + pos, size) : default_bits(f);
  *out_f = f;
  return true;
}

uint64_t kiln_vmfb_flatbuf_table_get_uint(kiln_vmfb_flatbuf_table_t t, uint16_t slot) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  uint64_t bits;
  return rd_scalar(t, slot, false, &f, &bits) ? (uint64_t)bits_int(f->kind, bits) : 0;
}

int64_t kiln_vmfb_flatbuf_table_get_int(kiln_vmfb_flatbuf_table_t t, uint16_t slot) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  uint64_t bits;
  return rd_scalar(t, slot, false, &f, &bits) ? bits_int(f->kind, bits) : 0;
}

bool kiln_vmfb_flatbuf_table_get_bool(kiln_vmfb_flatbuf_table_t t, uint16_t slot) {
  return kiln_vmfb_flatbuf_table_get_uint(t, slot) != 0;
}

double kiln_vmfb_flatbuf_table_get_float(kiln_vmfb_flatbuf_table_t t, uint16_t slot) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  uint64_t bits;
  return rd_scalar(t, slot, true, &f, &bits) ? bits_float(f->kind, bits) : 0.0;
}

/* Target of an offset field of kind `kind`, or 0. */
static size_t rd_offset_field(kiln_vmfb_flatbuf_table_t t, uint16_t slot, kiln_vmfb_flatbuf_kind_t kind,
                              const kiln_vmfb_flatbuf_field_desc_t **out_f) {
  const kiln_vmfb_flatbuf_field_desc_t *f = rd_desc(t, slot);
  if (!f || f->kind != kind) return 0;
  *out_f = f;
  size_t pos = rd_field(t, slot, 4);
  return pos ? rd_follow(t.data, t.len, pos) : 0;
}

const char *kiln_vmfb_flatbuf_table_get_string(kiln_vmfb_flatbuf_table_t t, uint16_t slot, size_t *out_len) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  size_t s = rd_offset_field(t, slot, KILN_FLATBUF_STRING, &f);
  return rd_string(t.data, t.len, s, out_len);
}

kiln_vmfb_flatbuf_table_t kiln_vmfb_flatbuf_table_get_table(kiln_vmfb_flatbuf_table_t t, uint16_t slot) {
  const kiln_vmfb_flatbuf_field_desc_t *f;
  size_t s = rd_offset_field(t, slot, KILN_FLATBUF_TABLE, &f);
  if (!s) return (kiln_vmfb_flatbuf_table_t){0};
  return (kiln_vmfb_flatbuf_table_t){.data = t.data, .len = t.len, .pos = s, .desc = f->table};
}

const uint8_t *kiln_vmfb_flatbuf_table_get_struct(kiln_vmfb_flatbuf_table_t t, uint16_t slot) {
  const kiln_vmfb_flatbuf_field_desc_t *f = rd_desc(t, slot);
  if (!f || f->kind != KILN_FLATBUF_STRUCT) return NULL;
  size_t pos = rd_field(t, slot, f->struct_size);
  return pos ? t.data + pos : NULL;
}

kiln_vmfb_flatbuf_vector_t kiln_vmfb_flatbuf_table_get_vector(kiln_vmfb_flatbuf_table_t t, uint16_t slot) {
  kiln_vmfb_flatbuf_vector_t none = {0};
  const kiln_vmfb_flatbuf_field_desc_t *f = rd_desc(t, slot);
  size_t elem = f ? vector_elem_size(f) : 0;
  if (!elem) return none;
  size_t pos = rd_field(t, slot, 4);
  size_t s = pos ? rd_follow(t.data, t.len, pos) : 0;
  if (!s) return none;
  uint32_t n = kiln_vmfb_flatbuf_load_u32(t.data + s);
  if (n > (t.len - s - 4) / elem) return none;
  return (kiln_vmfb_flatbuf_vector_t){
      .data = t.data, .len = t.len, .pos = s + 4, .count = n, .elem_size = elem, .field = f};
}

uint8_t kiln_vmfb_flatbuf_table_get_union(kiln_vmfb_flatbuf_table_t t, uint16_t slot,
                                          kiln_vmfb_flatbuf_table_t *out_value) {
  *out_value = (kiln_vmfb_flatbuf_table_t){0};
  const kiln_vmfb_flatbuf_field_desc_t *f = rd_desc(t, slot);
  if (!f || f->kind != KILN_FLATBUF_UNION || slot == 0) return 0;
  size_t s = rd_offset_field(t, slot, KILN_FLATBUF_UNION, &f);
  uint8_t type = (uint8_t)kiln_vmfb_flatbuf_table_get_uint(t, (uint16_t)(slot - 1));
  if (s && type >= 1 && type <= f->union_desc->member_count) {
    *out_value = (kiln_vmfb_flatbuf_table_t){
        .data = t.data, .len = t.len, .pos = s, .desc = f->union_desc->members[type - 1]};
  }
  return type;
}

size_t kiln_vmfb_flatbuf_table_get_union_count(kiln_vmfb_flatbuf_table_t t, uint16_t slot) {
  const kiln_vmfb_flatbuf_field_desc_t *f = rd_desc(t, slot);
  if (!f || f->kind != KILN_FLATBUF_VECTOR_UNION || slot == 0) return 0;
  kiln_vmfb_flatbuf_vector_t types = kiln_vmfb_flatbuf_table_get_vector(t, (uint16_t)(slot - 1));
  kiln_vmfb_flatbuf_vector_t values = kiln_vmfb_flatbuf_table_get_vector(t, slot);
  return types.count == values.count ? values.count : 0;
}

uint8_t kiln_vmfb_flatbuf_table_get_union_at(kiln_vmfb_flatbuf_table_t t, uint16_t slot, size_t index,
                                             kiln_vmfb_flatbuf_table_t *out_value) {
  *out_value = (kiln_vmfb_flatbuf_table_t){0};
  if (index >= kiln_vmfb_flatbuf_table_get_union_count(t, slot)) return 0;
  kiln_vmfb_flatbuf_vector_t types = kiln_vmfb_flatbuf_table_get_vector(t, (uint16_t)(slot - 1));
  kiln_vmfb_flatbuf_vector_t values = kiln_vmfb_flatbuf_table_get_vector(t, slot);
  uint8_t type = t.data[types.pos + index];
  const kiln_vmfb_flatbuf_union_desc_t *u = values.field->union_desc;
  size_t s = rd_follow(t.data, t.len, values.pos + 4 * index);
  if (s && type >= 1 && type <= u->member_count) {
    *out_value =
        (kiln_vmfb_flatbuf_table_t){.data = t.data, .len = t.len, .pos = s, .desc = u->members[type - 1]};
  }
  return type;
}

size_t kiln_vmfb_flatbuf_vector_count(kiln_vmfb_flatbuf_vector_t v) { return v.data ? v.count : 0; }

const uint8_t *kiln_vmfb_flatbuf_vector_data(kiln_vmfb_flatbuf_vector_t v) {
  if (!v.data || !v.count) return NULL;
  kiln_vmfb_flatbuf_kind_t k = v.field->kind;
  if (k != KILN_FLATBUF_VECTOR && k != KILN_FLATBUF_VECTOR_STRUCT && k != KILN_FLATBUF_VECTOR_UNION_TYPE) {
    return NULL;
  }
  return v.data + v.pos;
}

/* The element kind of a scalar vector (union types read as u8), or NONE. */
static kiln_vmfb_flatbuf_kind_t rd_elem_kind(kiln_vmfb_flatbuf_vector_t v, size_t index) {
  if (!v.data || index >= v.count) return KILN_FLATBUF_NONE;
  if (v.field->kind == KILN_FLATBUF_VECTOR) return v.field->elem_kind;
  if (v.field->kind == KILN_FLATBUF_VECTOR_UNION_TYPE) return KILN_FLATBUF_U8;
  return KILN_FLATBUF_NONE;
}

int64_t kiln_vmfb_flatbuf_vector_get_int(kiln_vmfb_flatbuf_vector_t v, size_t index) {
  kiln_vmfb_flatbuf_kind_t k = rd_elem_kind(v, index);
  if (!is_integer(k)) return 0;
  return bits_int(k, load_n(v.data + v.pos + index * v.elem_size, v.elem_size));
}

uint64_t kiln_vmfb_flatbuf_vector_get_uint(kiln_vmfb_flatbuf_vector_t v, size_t index) {
  return (uint64_t)kiln_vmfb_flatbuf_vector_get_int(v, index);
}

double kiln_vmfb_flatbuf_vector_get_float(kiln_vmfb_flatbuf_vector_t v, size_t index) {
  kiln_vmfb_flatbuf_kind_t k = rd_elem_kind(v, index);
  if (!is_float(k)) return 0.0;
  return bits_float(k, load_n(v.data + v.pos + index * v.elem_size, v.elem_size));
}

const char *kiln_vmfb_flatbuf_vector_get_string(kiln_vmfb_flatbuf_vector_t v, size_t index, size_t *out_len) {
  if (out_len) *out_len = 0;
  if (!v.data || index >= v.count || v.field->kind != KILN_FLATBUF_VECTOR_STRING) return NULL;
  size_t s = rd_follow(v.data, v.len, v.pos + 4 * index);
  return rd_string(v.data, v.len, s, out_len);
}

kiln_vmfb_flatbuf_table_t kiln_vmfb_flatbuf_vector_get_table(kiln_vmfb_flatbuf_vector_t v, size_t index) {
  if (!v.data || index >= v.count || v.field->kind != KILN_FLATBUF_VECTOR_TABLE) {
    return (kiln_vmfb_flatbuf_table_t){0};
  }
  size_t s = rd_follow(v.data, v.len, v.pos + 4 * index);
  if (!s) return (kiln_vmfb_flatbuf_table_t){0};
  return (kiln_vmfb_flatbuf_table_t){.data = v.data, .len = v.len, .pos = s, .desc = v.field->table};
}

const uint8_t *kiln_vmfb_flatbuf_vector_get_struct(kiln_vmfb_flatbuf_vector_t v, size_t index) {
  if (!v.data || index >= v.count || v.field->kind != KILN_FLATBUF_VECTOR_STRUCT) return NULL;
  return v.data + v.pos + index * v.elem_size;
}
