/* Client-facing text (client_text.h). */
#include "daemon/client_text.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"

static char *g_state_dir; /* set once before any call; read-only afterwards */

void kilnd_client_text_init(const char *state_dir) {
  kiln_free(g_state_dir);
  g_state_dir = state_dir && *state_dir ? kiln_strdup(state_dir) : NULL;
}

/* `message` with every occurrence of the state directory replaced by "STATE",
 * into `out`; false when it has none. */
static bool hide_paths(const char *message, kiln_buf_t *out) {
  if (!g_state_dir || !strstr(message, g_state_dir)) return false;
  size_t n = strlen(g_state_dir);
  for (const char *p = message, *hit; *p; p = hit + n) {
    hit = strstr(p, g_state_dir);
    if (!hit) {
      kiln_buf_append_str(out, p);
      break;
    }
    kiln_buf_append(out, p, (size_t)(hit - p));
    kiln_buf_append_str(out, "STATE");
  }
  return true;
}

char *kilnd_message_for_client(int *code, const char *message, const char *context) {
  if (!message) message = "";
  if (*code == KILN_STATUS_PERMISSION_DENIED) {
    kiln_log(KILN_LOG_ERROR, "state_not_writable", "context=%s message=\"%s\"", context ? context : "",
             message);
    *code = KILN_STATUS_FAILED_PRECONDITION;
    return kiln_buf_sprintf("%s (%s)", KILND_STATE_NOT_WRITABLE, context ? context : "");
  }
  kiln_buf_t hidden;
  kiln_buf_init(&hidden);
  if (!hide_paths(message, &hidden)) {
    kiln_buf_deinit(&hidden);
    return NULL;
  }
  kiln_log(KILN_LOG_INFO, "client_message_paths_hidden", "context=%s message=\"%s\"", context ? context : "",
           message);
  char *out = kiln_buf_take(&hidden);
  kiln_buf_deinit(&hidden);
  return out;
}

kiln_status_t kilnd_status_for_client(kiln_status_t status, const char *context) {
  if (!status) return NULL;
  int code = (int)kiln_status_code(status);
  char *message = kilnd_message_for_client(&code, kiln_status_message(status), context);
  if (!message) return status;
  kiln_status_t replaced = KILN_STATUS((kiln_status_code_t)code, "%s", message);
  kiln_free(message);
  kiln_status_free(status);
  return replaced;
}
