/* kiln: the thin CLI for kilnd. Parses settings (defaults < config file < KILN_*
 * environment < flags), finds the command, makes its RPCs, prints, and exits with
 * a code that says what class of failure happened. Links no MLIR or LLVM. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

#include "client/cli.h"

static const struct {
  const char *name;
  kiln_cli_command_fn_t fn;
  const char *summary;
} commands[] = {
    {"compile", kiln_cli_compile,
     "FILE --target T[,T...] [-o DIR]: compile, stream progress, write DIR/<target>.vmfb and "
     "DIR/kiln-manifest.json"},
    {"fetch", kiln_cli_fetch,
     "DIGEST | --source S --target T [-o FILE]: download one VMFB (verified, atomic, resumable)"},
    {"find", kiln_cli_find, "[--source S] [--target T] [--label K=V] [--all]: list stored artifacts"},
    {"status", kiln_cli_status, "JOB: a job's state and its targets so far"},
    {"watch", kiln_cli_watch, "JOB: follow a job to its end (exit 0 DONE, 1 FAILED or CANCELLED)"},
    {"cancel", kiln_cli_cancel, "JOB [--reason TEXT]: cancel a job"},
    {"explain", kiln_cli_explain,
     "FILE|--source S --target T [--flag F]: would compile hit the cache, and if not, why"},
    {"info", kiln_cli_info, "what kilnd is: version, compiler, HAL version, targets and aliases"},
    {"health", kiln_cli_health, "is kilnd serving? (grpc.health.v1 Check)"},
    {"stats", kiln_cli_stats, "uptime and calls by method and status"},
    {"inspect", NULL,
     "read VMFB files locally (no kilnd): versions, imports, executables, provenance, class"},
    {"scan", NULL,
     "PATH...: find VMFBs under files and directories locally (no kilnd): class, and where a "
     "legacy one's source would come from"},
    {"recompile", kiln_cli_recompile,
     "PATH... [-o DIR | --in-place [--backup]] [--manifest FILE] [--jobs N] [--dry-run] [--force]: "
     "recompile every legacy VMFB under PATHs on kilnd (default output NAME.hal7.vmfb beside "
     "NAME.vmfb); a table or --json report"},
    {"cache", kiln_cli_cache,
     "the artifact cache: stats | verify [--dry-run] | gc [--max-bytes SIZE] | pin DIGEST | unpin DIGEST"},
};

static void print_usage(void) {
  printf("usage: kiln [options] COMMAND\n\nThe kiln client: talks to kilnd over gRPC.\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    printf("  %-9s %s\n", commands[i].name, commands[i].summary);
  }
  printf("\noptions (before or after the command):\n");
  kiln_config_print_help(kiln_cli_settings_table(), stdout);
  printf(
      "\nexit status:\n"
      "  0  success\n"
      "  1  kilnd answered with an error; compile, watch: a target failed or the job was\n"
      "     cancelled; explain: a target would miss the cache\n"
      "  2  bad command, flag or value (compile: also a request kilnd refused as invalid,\n"
      "     such as an unknown target)\n"
      "  3  kilnd could not be reached\n"
      "  4  kilnd did not answer within --timeout (compile: the compile ran past it)\n"
      "  5  kilnd is up but not serving\n"
      "  6  inspect, scan: a file is a legacy (pre-HAL 0.7) VMFB\n"
      "  7  inspect, scan: a file is not a readable VMFB\n"
      "  8  recompile: a file failed, had no source or was invalid (the report says which)\n"
      "  9  kilnd refused the credentials: no or unknown token (UNAUTHENTICATED), or the\n"
      "     token's role does not allow the command (PERMISSION_DENIED)\n"
      "  130 recompile: interrupted (SIGINT or SIGTERM); run it again to resume\n");
}

/* The bearer token: the first line of --token-file, else KILN_TOKEN, else none
 * (*out_token NULL). Returns 0, or KILN_EXIT_USAGE after saying why. The token is
 * never printed. */
static int load_token(const kiln_cli_settings_t *settings, char **out_token) {
  *out_token = NULL;
  if (settings->token_file && *settings->token_file) {
    FILE *f = fopen(settings->token_file, "r");
    if (!f) {
      fprintf(stderr, "kiln: --token-file %s: cannot open it: %s\n", settings->token_file, strerror(errno));
      return KILN_EXIT_USAGE;
    }
    char line[4200];
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    size_t len = got ? strcspn(line, "\r\n") : 0;
    while (len && (line[len - 1] == ' ' || line[len - 1] == '\t')) len--;
    size_t start = 0;
    while (start < len && (line[start] == ' ' || line[start] == '\t')) start++;
    if (len == start) {
      fprintf(stderr, "kiln: --token-file %s: the first line holds no token\n", settings->token_file);
      return KILN_EXIT_USAGE;
    }
    line[len] = '\0';
    *out_token = kiln_strdup(line + start);
    memset(line, 0, sizeof line);
    return 0;
  }
  const char *env = getenv("KILN_TOKEN");
  if (env && *env) *out_token = kiln_strdup(env);
  return 0;
}

int main(int argc, char **argv) {
  kiln_alloc_tune_for_transfers(); /* gRPC's read buffers of a download are reused */
  const kiln_config_table_t *table = kiln_cli_settings_table();
  kiln_cli_settings_t settings;
  memset(&settings, 0, sizeof settings);
  const char *positional[16];
  size_t npos = 0;
  kiln_status_t status = kiln_config_load(table, &settings, "config", argc, argv, positional,
                                          sizeof positional / sizeof positional[0], &npos);
  int code = KILN_EXIT_USAGE;
  if (status) {
    fprintf(stderr, "kiln: %s\n", kiln_status_message(status));
    kiln_status_free(status);
  } else if (settings.help || (npos > 0 && strcmp(positional[0], "help") == 0)) {
    print_usage();
    code = KILN_EXIT_OK;
  } else if (settings.version) {
    printf("kiln %s\n", KILN_VERSION);
    code = KILN_EXIT_OK;
  } else if (npos == 0) {
    fprintf(stderr, "kiln: no command given (try `kiln info`, or `kiln --help`)\n");
  } else {
    size_t i = 0;
    for (; i < sizeof commands / sizeof commands[0]; i++) {
      if (strcmp(commands[i].name, positional[0]) == 0) break;
    }
    if (i == sizeof commands / sizeof commands[0]) {
      fprintf(stderr, "kiln: unknown command '%s' (see `kiln --help`)\n", positional[0]);
    } else if (!commands[i].fn) {
      /* Local commands: no kilnd, no channel. */
      code = strcmp(commands[i].name, "scan") == 0
                 ? kiln_cli_scan(&settings, (int)npos - 1, positional + 1)
                 : kiln_cli_inspect(&settings, (int)npos - 1, positional + 1);
    } else {
      kiln_client_t *client = NULL;
      char *token = NULL;
      if (load_token(&settings, &token) != 0) {
        kiln_config_deinit(table, &settings);
        return KILN_EXIT_USAGE;
      }
      kiln_client_options_t options = {
          .tls = settings.tls,
          .tls_ca = settings.tls_ca,
          .tls_cert = settings.tls_cert,
          .tls_key = settings.tls_key,
          .tls_server_name = settings.tls_server_name,
          .token = token,
      };
      status = kiln_client_create_ex(settings.addr, kiln_cli_timeout_ms(&settings, false),
                                     settings.max_message_bytes, &options, &client);
      if (token) {
        memset(token, 0, strlen(token));
        kiln_free(token);
      }
      if (status) {
        fprintf(stderr, "kiln: %s\n", kiln_status_message(status));
        kiln_status_free(status);
      } else {
        code = commands[i].fn(&settings, client, (int)npos - 1, positional + 1);
        /* kilnd logs every call with its request id: name the failed one. */
        const char *failed_id = kiln_client_failed_request_id(client);
        if (code != KILN_EXIT_OK && failed_id) {
          fprintf(stderr, "kiln: request id: %s (search kilnd's log for it)\n", failed_id);
        }
        kiln_client_destroy(client);
      }
    }
  }
  kiln_config_deinit(table, &settings);
  return code;
}
