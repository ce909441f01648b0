/* Settings table, exit-code mapping and error reporting for the kiln CLI. */
#include "client/cli.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "base/alloc.h"

static const char *const priorities[] = {"", "interactive", "batch", "bulk", NULL};

static const kiln_config_option_t options[] = {
    {"config", 'c', KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, config), NULL, "FILE",
     "read settings from FILE (name = value lines)", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"addr", 'a', KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, addr), KILN_CLI_DEFAULT_ADDR, "ADDR",
     "kilnd to talk to: HOST:PORT, [IPV6]:PORT or unix:PATH", 0, 0, NULL, 0},
    {"timeout", 't', KILN_CONFIG_DURATION, offsetof(kiln_cli_settings_t, timeout_ms), NULL, "DURATION",
     "deadline of each call to kilnd (default 10s; 1h for watch, cache verify and gc); "
     "compile: of the whole compile (default 30m)",
     1, 24 * 3600 * 1000, NULL, 0},
    {"max-message-bytes", 0, KILN_CONFIG_SIZE, offsetof(kiln_cli_settings_t, max_message_bytes), "64MiB",
     "SIZE", "largest answer accepted from kilnd (a download needs kilnd's chunk_size_bytes, 2 MiB, plus a little)",
     1024, 2147483647, NULL, 0},
    {"service", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, service), "", "NAME",
     "health: the service to check (\"\" = the whole server)", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"dry-run", 0, KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, dry_run), NULL, NULL,
     "cache verify: report problems without repairing them; recompile: predict each file's "
     "outcome, compile and write nothing",
     0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"max-bytes", 0, KILN_CONFIG_SIZE, offsetof(kiln_cli_settings_t, max_bytes), NULL, "SIZE",
     "cache gc: evict down to SIZE on disk (default: kilnd's cache-capacity)", 0, 0, NULL,
     KILN_CONFIG_CLI_ONLY},
    {"target", 0, KILN_CONFIG_LIST, offsetof(kiln_cli_settings_t, target), NULL, "T[,T...]",
     "compile, explain: targets (canonical ids or aliases; see `kiln info`); fetch, find: one "
     "target",
     0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"output", 'o', KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, output), NULL, "PATH",
     "compile: directory for the VMFBs and kiln-manifest.json (default .); fetch: the file; "
     "recompile: mirror the tree under PATH (default: NAME.hal7.vmfb beside each file)",
     0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"flag", 0, KILN_CONFIG_LIST, offsetof(kiln_cli_settings_t, flag), NULL, "FLAG",
     "compile, fetch, explain: an extra iree-compile flag (--flag=--iree-...)", 0, 0, NULL,
     KILN_CONFIG_CLI_ONLY},
    {"label", 0, KILN_CONFIG_LIST, offsetof(kiln_cli_settings_t, label), NULL, "KEY=VALUE",
     "compile, recompile: record a label on the artifacts; find: only artifacts with it", 0, 0, NULL,
     KILN_CONFIG_CLI_ONLY},
    {"priority", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, priority), NULL, "CLASS",
     "compile, recompile: interactive, batch or bulk (default: kilnd's: interactive for "
     "compile, bulk for recompile)",
     0, 0, priorities, 0},
    {"request-id", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, request_id), NULL, "ID",
     "compile: idempotency key (default: a random UUID per invocation)", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"source", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, source), NULL, "DIGEST|FILE",
     "fetch, find, explain: the source, by digest or as a file to hash", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"limit", 0, KILN_CONFIG_INT, offsetof(kiln_cli_settings_t, limit), NULL, "N",
     "find: page size, 1..1000 (default: kilnd's, 100)", 1, 1000, NULL, KILN_CONFIG_CLI_ONLY},
    {"page-token", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, page_token), NULL, "TOKEN",
     "find: the page after a previous one", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"all", 0, KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, all), NULL, NULL, "find: every page", 0, 0,
     NULL, KILN_CONFIG_CLI_ONLY},
    {"reason", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, reason), NULL, "TEXT",
     "cancel: why, for kilnd's log and the job's last event", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"in-place", 0, KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, in_place), NULL, NULL,
     "recompile: replace each legacy file with its new VMFB", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"backup", 0, KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, backup), NULL, NULL,
     "recompile --in-place: keep the old file as FILE.bak (an existing .bak is kept)", 0, 0, NULL,
     KILN_CONFIG_CLI_ONLY},
    {"manifest", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, manifest), NULL, "FILE",
     "recompile: JSON or CSV mapping VMFB paths or digests to source, targets and flags", 0, 0, NULL,
     KILN_CONFIG_CLI_ONLY},
    {"allow-outside", 0, KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, allow_outside), NULL, NULL,
     "recompile --manifest: let its sources lie outside the manifest's folder (refused by default: a "
     "manifest from elsewhere must not upload arbitrary files)",
     0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"jobs", 0, KILN_CONFIG_INT, offsetof(kiln_cli_settings_t, jobs), NULL, "N",
     "recompile: files in flight on kilnd at most, 1..4096 (default 1024)", 1, 4096, NULL,
     KILN_CONFIG_CLI_ONLY},
    {"force", 0, KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, force), NULL, NULL,
     "recompile: also recompile files that are already current", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"tls", 0, KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, tls), NULL, NULL,
     "talk TLS to kilnd, verifying it with gRPC's default roots (implied by --tls-ca)", 0, 0, NULL, 0},
    {"tls-ca", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, tls_ca), NULL, "FILE",
     "talk TLS to kilnd and verify its certificate with this PEM CA", 0, 0, NULL, 0},
    {"tls-cert", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, tls_cert), NULL, "FILE",
     "mutual TLS: present this PEM client certificate (with --tls-key)", 0, 0, NULL, 0},
    {"tls-key", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, tls_key), NULL, "FILE",
     "the PEM private key of --tls-cert", 0, 0, NULL, 0},
    {"tls-server-name", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, tls_server_name), NULL, "NAME",
     "the name kilnd's certificate must carry, when it differs from --addr's host", 0, 0, NULL, 0},
    {"token-file", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, token_file), NULL, "FILE",
     "send the bearer token on this file's first line with every call (default: the "
     "KILN_TOKEN variable, if set)",
     0, 0, NULL, 0},
    {"json", 'j', KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, json), NULL, NULL,
     "print machine-readable JSON (field names as in kiln.proto)", 0, 0, NULL, 0},
    {"help", 'h', KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, help), NULL, NULL,
     "show this help and exit", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"version", 'V', KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, version), NULL, NULL,
     "print the client version and exit", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
};

static const kiln_config_table_t table = {"kiln", "KILN_", options, sizeof options / sizeof options[0]};

const kiln_config_table_t *kiln_cli_settings_table(void) { return &table; }

int kiln_cli_call(const kiln_cli_settings_t *settings, kiln_client_t *client, const char *what,
                  const char *method, const ProtobufCMessage *request,
                  const ProtobufCMessageDescriptor *response_descriptor, ProtobufCMessage **out_response) {
  kiln_status_t status = kiln_client_unary(client, method, request, response_descriptor, out_response);
  return status ? kiln_cli_report(settings, what, kiln_client_timeout(client), status) : KILN_EXIT_OK;
}

int64_t kiln_cli_timeout_ms(const kiln_cli_settings_t *settings, bool long_running) {
  if (settings->timeout_ms > 0) return settings->timeout_ms;
  return long_running ? KILN_CLI_LONG_TIMEOUT_MS : KILN_CLI_DEFAULT_TIMEOUT_MS;
}

int64_t kiln_cli_timeout_or(const kiln_cli_settings_t *settings, int64_t default_ms) {
  return settings->timeout_ms > 0 ? settings->timeout_ms : default_ms;
}

void kiln_cli_strings_free(char **strings, size_t n) {
  for (size_t i = 0; i < n; i++) kiln_free(strings[i]);
  kiln_free(strings);
}

void kiln_cli_strings_split(const char *text, const char *seps, char ***items, size_t *n) {
  while (text && *text) {
    size_t len = strcspn(text, seps);
    const char *a = text, *b = text + len;
    while (a < b && isspace((unsigned char)*a)) a++;
    while (b > a && isspace((unsigned char)b[-1])) b--;
    if (b > a) {
      *items = kiln_realloc(*items, (*n + 1) * sizeof **items);
      char *item = kiln_malloc((size_t)(b - a) + 1);
      memcpy(item, a, (size_t)(b - a));
      item[b - a] = '\0';
      (*items)[(*n)++] = item;
    }
    text += len;
    if (*text) text++;
  }
}

void kiln_cli_targets_split(const kiln_config_list_t *targets, char ***out_names, size_t *out_n) {
  char **names = NULL;
  size_t n = 0;
  for (size_t i = 0; i < targets->count; i++) kiln_cli_strings_split(targets->items[i], ",", &names, &n);
  *out_names = names;
  *out_n = n;
}

void kiln_cli_labels_free(kiln_cli_label_t *labels, size_t n) {
  for (size_t i = 0; i < n; i++) {
    kiln_free(labels[i].key);
    kiln_free(labels[i].value);
  }
  kiln_free(labels);
}

kiln_status_t kiln_cli_labels_parse(const kiln_config_list_t *items, kiln_cli_label_t **out_labels,
                                    size_t *out_n) {
  *out_labels = NULL;
  *out_n = 0;
  kiln_cli_label_t *labels = NULL;
  size_t n = 0;
  for (size_t i = 0; i < items->count; i++) {
    const char *item = items->items[i];
    const char *eq = strchr(item, '=');
    if (!eq || eq == item) {
      kiln_cli_labels_free(labels, n);
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "--label '%s': expected KEY=VALUE with a non-empty key, e.g. "
                         "--label model=resnet50",
                         item);
    }
    size_t key_len = (size_t)(eq - item);
    size_t k = 0;
    for (; k < n; k++) {
      if (strlen(labels[k].key) == key_len && strncmp(labels[k].key, item, key_len) == 0) break;
    }
    if (k == n) {
      labels = kiln_realloc(labels, (n + 1) * sizeof *labels);
      labels[n].key = kiln_malloc(key_len + 1);
      memcpy(labels[n].key, item, key_len);
      labels[n].key[key_len] = '\0';
      labels[n].value = NULL;
      n++;
    }
    kiln_free(labels[k].value);
    labels[k].value = kiln_strdup(eq + 1);
  }
  *out_labels = labels;
  *out_n = n;
  return NULL;
}

int kiln_cli_priority_value(const char *priority) {
  if (!priority) return 0;
  for (int i = 1; priorities[i]; i++) {
    if (strcmp(priority, priorities[i]) == 0) return i;
  }
  return 0;
}

void kiln_cli_uuid(char out[37]) {
  unsigned char b[16];
  size_t got = 0;
  while (got < sizeof b) {
    ssize_t r = getrandom(b + got, sizeof b - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  if (got < sizeof b) {
    /* No entropy source: still unique enough per process for an idempotency key. */
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
      got += fread(b + got, 1, sizeof b - got, f);
      fclose(f);
    }
  }
  b[6] = (unsigned char)((b[6] & 0x0F) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3F) | 0x80);
  snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
           b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

int kiln_cli_expect_args(const char *command, int argc, int min, int max, const char *usage) {
  if (argc >= min && argc <= max) return 0;
  fprintf(stderr, "kiln: %s: %s\nusage: kiln %s\n", command,
          argc < min ? "missing argument" : "too many arguments", usage);
  return KILN_EXIT_USAGE;
}

int kiln_cli_exit_code(const kiln_status_t status) {
  switch (kiln_status_code(status)) {
    case KILN_STATUS_OK: return KILN_EXIT_OK;
    case KILN_STATUS_UNAVAILABLE: return KILN_EXIT_UNREACHABLE;
    case KILN_STATUS_DEADLINE_EXCEEDED: return KILN_EXIT_TIMEOUT;
    case KILN_STATUS_UNAUTHENTICATED:
    case KILN_STATUS_PERMISSION_DENIED: return KILN_EXIT_DENIED;
    default: return KILN_EXIT_FAILED;
  }
}

int kiln_cli_report(const kiln_cli_settings_t *settings, const char *what, int64_t timeout_ms,
                    kiln_status_t status) {
  int code = kiln_cli_exit_code(status);
  kiln_status_code_t grpc_code = kiln_status_code(status);
  if (code == KILN_EXIT_UNREACHABLE) {
    fprintf(stderr,
            "kiln: %s: cannot reach kilnd at %s (%s).\n"
            "kiln: is kilnd running? Start it with `kilnd --listen %s`, or point --addr or "
            "KILN_ADDR at a running one.\n",
            what, settings->addr, kiln_status_message(status), settings->addr);
    if (!settings->tls && !settings->tls_ca && !settings->tls_cert) {
      fprintf(stderr, "kiln: if kilnd serves TLS, pass --tls-ca FILE (or --tls).\n");
    } else {
      /* gRPC reports a failed handshake only as a closed socket. */
      fprintf(stderr,
              "kiln: if kilnd is running, the TLS handshake may have failed: check --tls-ca (the "
              "CA that signed kilnd's certificate), --tls-server-name, and whether kilnd wants a "
              "client certificate (--tls-cert, --tls-key).\n");
    }
  } else if (code == KILN_EXIT_DENIED) {
    fprintf(stderr, "kiln: %s: kilnd refused the call: %s: %s\n", what, kiln_status_code_name(grpc_code),
            kiln_status_message(status));
    fprintf(stderr, grpc_code == KILN_STATUS_UNAUTHENTICATED
                        ? "kiln: pass a token kilnd knows with --token-file FILE or KILN_TOKEN.\n"
                        : "kiln: use a token whose role allows this (read < submit < admin).\n");
  } else if (code == KILN_EXIT_TIMEOUT) {
    fprintf(stderr, "kiln: %s: kilnd at %s did not answer within %lld ms (%s); raise --timeout?\n", what,
            settings->addr, (long long)timeout_ms, kiln_status_message(status));
  } else {
    fprintf(stderr, "kiln: %s failed: %s: %s\n", what, kiln_status_code_name(grpc_code),
            kiln_status_message(status));
  }
  kiln_status_free(status);
  return code;
}
