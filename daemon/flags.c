/* Compile flag allow-list and normalization (see flags.h). */
#include "daemon/flags.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/flags.h"

/* Device and target selection belongs to `targets`. */
static const char *const target_flags[] = {
    "--iree-hal-target-device", "--iree-hal-target-backends", "--iree-cuda-target",
    "--iree-rocm-target",       "--iree-hip-target",          "--iree-vulkan-target",
    "--iree-llvmcpu-target",    "--iree-hal-target",          "--iree-hal-list-target-backends",
};

/* Parts of a name that mean a path or a side effect on the server. */
static const char *const path_words[] = {"dump",   "file", "path", "dir", "output", "executable-sources",
                                         "debug-", "trace"};

static size_t name_len(const char *flag) {
  const char *eq = strchr(flag, '=');
  return eq ? (size_t)(eq - flag) : strlen(flag);
}

static KILN_MUST_USE kiln_status_t check(const char *flag) {
  size_t len = strlen(flag);
  if (len == 0 || len > KILND_MAX_FLAG_BYTES) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "a flag must be 1 to %d bytes (got %zu)",
                       KILND_MAX_FLAG_BYTES, len);
  }
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)flag[i];
    if (c <= ' ' || c >= 0x7f) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "flag '%.64s' holds a space or control character: pass one flag per entry", flag);
    }
  }
  if (strncmp(flag, "--iree-", 7) != 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "flag '%.64s' is not allowed: kiln accepts iree-compile flags that start with --iree-",
                       flag);
  }
  size_t n = name_len(flag);
  for (size_t i = 0; i < sizeof target_flags / sizeof target_flags[0]; i++) {
    size_t t = strlen(target_flags[i]);
    if (n >= t && strncmp(flag, target_flags[i], t) == 0) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "flag '%.*s' chooses the device or target: list targets in the request instead",
                         (int)n, flag);
    }
  }
  for (size_t i = 0; i < sizeof path_words / sizeof path_words[0]; i++) {
    const char *w = path_words[i];
    const char *hit = strstr(flag, w);
    if (hit && (size_t)(hit - flag) < n) {
      return KILN_STATUS(
          KILN_STATUS_INVALID_ARGUMENT,
          "flag '%.*s' is not allowed: it would write to or read from the server's file system", (int)n,
          flag);
    }
  }
  if (strchr(flag + n, '/')) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "flag '%.*s' has a value with '/': requests cannot name paths on the server", (int)n,
                       flag);
  }
  return NULL;
}

kiln_status_t kilnd_flags_normalize(const char *const *flags, size_t n, char ***out_flags, size_t *out_n) {
  *out_flags = NULL;
  *out_n = 0;
  if (n > KILND_MAX_FLAGS) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%zu flags: at most %d are accepted", n,
                       KILND_MAX_FLAGS);
  }
  for (size_t i = 0; i < n; i++) KILN_RETURN_IF_ERROR(check(flags[i]));
  *out_n = kiln_flags_normalize(flags, n, out_flags); /* the one rule (base/flags.h) */
  return NULL;
}

void kilnd_flags_free(char **flags, size_t n) { kiln_flags_free(flags, n); }
