/* The host plan's one destructor. */
#include "compiler/vmfb/plan.h"

#include <string.h>

#include "base/alloc.h"

void kiln_vmfb_plan_deinit(kiln_vmfb_plan_t *plan) {
  if (!plan) return;
  for (size_t f = 0; f < plan->n_functions; f++) {
    kiln_vmfb_function_t *fn = &plan->functions[f];
    for (size_t i = 0; i < fn->n_steps; i++) {
      kiln_free(fn->steps[i].bindings);
      kiln_free(fn->steps[i].constants);
    }
    for (size_t i = 0; i < fn->n_buffers; i++) kiln_free(fn->buffers[i].data);
    kiln_free(fn->name);
    kiln_free(fn->inputs);
    kiln_free(fn->results);
    kiln_free(fn->buffers);
    kiln_free(fn->steps);
  }
  kiln_free(plan->functions);
  memset(plan, 0, sizeof *plan);
}
