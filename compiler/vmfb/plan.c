/* The host plan's destructor and its element type table. */
#include "compiler/vmfb/plan.h"

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"

bool kiln_vmfb_exprs_eval(const kiln_vmfb_function_t *fn, const int64_t (*dims)[KILN_VMFB_MAX_RANK],
                          int64_t *values) {
  for (size_t i = 0; i < fn->n_exprs; i++) {
    const kiln_vmfb_expr_t *x = &fn->exprs[i];
    uint32_t id = (uint32_t)i + 1;
    bool binary = x->kind >= KILN_VMFB_EXPR_ADD;
    if (binary && (x->a == 0 || x->a >= id || x->b == 0 || x->b >= id)) return false;
    if (x->kind == KILN_VMFB_EXPR_SELECT && (x->c == 0 || x->c >= id)) return false;
    int64_t a = binary ? values[x->a - 1] : 0, b = binary ? values[x->b - 1] : 0;
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    int64_t v = 0;
    switch (x->kind) {
      case KILN_VMFB_EXPR_CONST: v = x->value; break;
      case KILN_VMFB_EXPR_INPUT_DIM:
        if (x->a >= fn->n_inputs || x->b >= KILN_VMFB_MAX_RANK) return false;
        v = dims[x->a][x->b];
        break;
      case KILN_VMFB_EXPR_ADD: v = (int64_t)(ua + ub); break;
      case KILN_VMFB_EXPR_SUB: v = (int64_t)(ua - ub); break;
      case KILN_VMFB_EXPR_MUL: v = (int64_t)(ua * ub); break;
      case KILN_VMFB_EXPR_DIV_S:
        if (b == 0 || (a == INT64_MIN && b == -1)) return false;
        v = a / b;
        break;
      case KILN_VMFB_EXPR_DIV_U:
        if (ub == 0) return false;
        v = (int64_t)(ua / ub);
        break;
      case KILN_VMFB_EXPR_REM_S:
        if (b == 0 || (a == INT64_MIN && b == -1)) return false;
        v = a % b;
        break;
      case KILN_VMFB_EXPR_REM_U:
        if (ub == 0) return false;
        v = (int64_t)(ua % ub);
        break;
      case KILN_VMFB_EXPR_MIN_S: v = a < b ? a : b; break;
      case KILN_VMFB_EXPR_MIN_U: v = (int64_t)(ua < ub ? ua : ub); break;
      case KILN_VMFB_EXPR_MAX_S: v = a > b ? a : b; break;
      case KILN_VMFB_EXPR_MAX_U: v = (int64_t)(ua > ub ? ua : ub); break;
      case KILN_VMFB_EXPR_AND: v = a & b; break;
      case KILN_VMFB_EXPR_OR: v = a | b; break;
      case KILN_VMFB_EXPR_XOR: v = a ^ b; break;
      case KILN_VMFB_EXPR_EQ: v = a == b; break;
      case KILN_VMFB_EXPR_NE: v = a != b; break;
      case KILN_VMFB_EXPR_LT_S: v = a < b; break;
      case KILN_VMFB_EXPR_LT_U: v = ua < ub; break;
      case KILN_VMFB_EXPR_SELECT: v = a ? b : values[x->c - 1]; break;
      default: return false;
    }
    values[i] = v;
  }
  return true;
}

void kiln_vmfb_plan_deinit(kiln_vmfb_plan_t *plan) {
  if (!plan) return;
  for (size_t f = 0; f < plan->n_functions; f++) {
    kiln_vmfb_function_t *fn = &plan->functions[f];
    for (size_t i = 0; i < fn->n_steps; i++) {
      kiln_free(fn->steps[i].bindings);
      kiln_free(fn->steps[i].constants);
    }
    for (size_t i = 0; i < fn->n_buffers; i++) {
      kiln_free(fn->buffers[i].data);
      kiln_free(fn->buffers[i].words);
    }
    kiln_free(fn->exprs);
    kiln_free(fn->name);
    kiln_free(fn->inputs);
    kiln_free(fn->results);
    kiln_free(fn->buffers);
    kiln_free(fn->steps);
  }
  kiln_free(plan->functions);
  for (size_t v = 0; v < plan->n_variables; v++) {
    kiln_free(plan->variables[v].name);
    kiln_free(plan->variables[v].data);
  }
  kiln_free(plan->variables);
  memset(plan, 0, sizeof *plan);
}

static const struct {
  uint32_t type;
  const char *name;
} element_names[] = {
    {KILN_VMFB_ELEMENT_BOOL_8, "i1"},
    {KILN_VMFB_ELEMENT_INT_2, "i2"},
    {KILN_VMFB_ELEMENT_INT_4, "i4"},
    {KILN_VMFB_ELEMENT_INT_8, "i8"},
    {KILN_VMFB_ELEMENT_INT_16, "i16"},
    {KILN_VMFB_ELEMENT_INT_32, "i32"},
    {KILN_VMFB_ELEMENT_INT_64, "i64"},
    {KILN_VMFB_ELEMENT_FLOAT_16, "f16"},
    {KILN_VMFB_ELEMENT_FLOAT_32, "f32"},
    {KILN_VMFB_ELEMENT_FLOAT_64, "f64"},
    {KILN_VMFB_ELEMENT_BFLOAT_16, "bf16"},
    {KILN_VMFB_ELEMENT_FLOAT_8_E5M2, "f8E5M2"},
    {KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FN, "f8E4M3FN"},
    {KILN_VMFB_ELEMENT_FLOAT_8_E5M2_FNUZ, "f8E5M2FNUZ"},
    {KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FNUZ, "f8E4M3FNUZ"},
    {KILN_VMFB_ELEMENT_FLOAT_8_E8M0_FNU, "f8E8M0FNU"},
};

const char *kiln_vmfb_element_name(uint32_t element_type) {
  for (size_t i = 0; i < sizeof element_names / sizeof element_names[0]; i++) {
    if (element_names[i].type == element_type) return element_names[i].name;
  }
  return NULL;
}

bool kiln_vmfb_packed_bytes(uint32_t element_type, uint64_t elements, uint64_t *out_bytes) {
  uint64_t bits = kiln_vmfb_element_bits(element_type);
  /* i1 is stored a byte per element (IREE's BOOL_8), like every type of 8 bits
   * or more: only i2 and i4 pack. */
  uint64_t total;
  if (__builtin_mul_overflow(elements, bits, &total) || total / 8 + 1 > (uint64_t)INT64_MAX) {
    return false;
  }
  *out_bytes = (total + 7) / 8;
  return true;
}

bool kiln_vmfb_tensor_type_bytes(const kiln_vmfb_tensor_type_t *t, uint64_t *out_bytes) {
  uint64_t elements = 1;
  if (t->rank > KILN_VMFB_MAX_RANK) return false;
  for (uint32_t d = 0; d < t->rank; d++) {
    if (t->dims[d] < 0 || __builtin_mul_overflow(elements, (uint64_t)t->dims[d], &elements)) {
      return false;
    }
  }
  return kiln_vmfb_packed_bytes(t->element_type, elements, out_bytes);
}
