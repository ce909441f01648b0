/* PEM file text for TLS (pem.h). Buffers that held the bytes are wiped with
 * OPENSSL_cleanse before they are freed, since a key file's text is a secret. */
#include "base/pem.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"

kiln_status_t kiln_pem_read(const char *what, const char *path, char **out_text) {
  *out_text = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return KILN_STATUS_ERRNO(errno, "%s %s: cannot open it", what, path);
  kiln_buf_t text;
  kiln_buf_init(&text);
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && text.len <= KILN_PEM_MAX_BYTES) {
    kiln_buf_append(&text, chunk, n);
  }
  int err = ferror(f) ? errno : 0;
  fclose(f);
  OPENSSL_cleanse(chunk, sizeof chunk);
  kiln_status_t status = NULL;
  if (err) {
    status = KILN_STATUS_ERRNO(err, "%s %s: cannot read it", what, path);
  } else if (text.len == 0) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s %s: the file is empty", what, path);
  } else if (text.len > KILN_PEM_MAX_BYTES) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s %s: over 1 MiB; is it a PEM file?", what, path);
  } else if (!strstr(text.data, "-----BEGIN ")) {
    status =
        KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s %s: not a PEM file (no -----BEGIN line)", what, path);
  }
  if (status) {
    if (text.data) OPENSSL_cleanse(text.data, text.len);
    kiln_buf_deinit(&text);
    return status;
  }
  *out_text = kiln_buf_take(&text);
  return NULL;
}

void kiln_pem_free(char *text) {
  if (!text) return;
  OPENSSL_cleanse(text, strlen(text));
  kiln_free(text);
}
