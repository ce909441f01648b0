/* Unit tests for base/log. The log line IS the observable output here, so lines are
 * captured through a pipe and parsed back into key=value fields (never compared
 * whole: the timestamp changes). Covers: the line shape (ts=, level=, event= first,
 * one '\n' per line, a well-formed UTC timestamp), level filtering and
 * kiln_log_enabled, kiln_log_status's code=/msg=/at= fields, kv_str quoting that
 * round-trips through a logfmt parser, kiln_log_fields, and level name parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/status.h"

/* ---- fixture: a pipe the logger writes into ---- */

static int pipe_fds[2] = {-1, -1};
static char captured[256 * 1024];
static size_t captured_len;

static int group_setup(void **state) {
  (void)state;
  if (pipe(pipe_fds) != 0) return -1;
  if (fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK) != 0) return -1;
  /* Big enough for the largest test, so writes never block. */
  (void)fcntl(pipe_fds[1], F_SETPIPE_SZ, 1 << 20);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  kiln_log_configure(KILN_LOG_INFO, STDERR_FILENO);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  return 0;
}

/* Reads everything written so far into `captured` (NUL-terminated). */
static const char *drain(void) {
  captured_len = 0;
  for (;;) {
    ssize_t n = read(pipe_fds[0], captured + captured_len, sizeof captured - 1 - captured_len);
    if (n > 0) {
      captured_len += (size_t)n;
      if (captured_len == sizeof captured - 1) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break; /* EAGAIN: empty */
  }
  captured[captured_len] = '\0';
  return captured;
}

static int test_setup(void **state) {
  (void)state;
  kiln_log_configure(KILN_LOG_INFO, pipe_fds[1]);
  drain();
  return 0;
}

/* ---- a strict logfmt parser: key=value pairs separated by one space ---- */

enum { MAX_FIELDS = 32 };
typedef struct {
  char key[64];
  char *value; /* malloc'd */
} field_t;
typedef struct {
  field_t f[MAX_FIELDS];
  int n;
} fields_t;

static void fields_free(fields_t *fs) {
  for (int i = 0; i < fs->n; i++) free(fs->f[i].value);
  fs->n = 0;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int parse_line_raw(const char *line, size_t len, fields_t *out);

/* Parses one line (without its '\n'). Returns 0, or -1 when malformed (then `out`
 * holds nothing to free). */
static int parse_line(const char *line, size_t len, fields_t *out) {
  int rc = parse_line_raw(line, len, out);
  if (rc != 0) fields_free(out);
  return rc;
}

static int parse_line_raw(const char *line, size_t len, fields_t *out) {
  out->n = 0;
  size_t i = 0;
  while (i < len) {
    if (out->n == MAX_FIELDS) return -1;
    field_t *fd = &out->f[out->n];
    size_t k = 0;
    while (i < len && line[i] != '=' && line[i] != ' ' && line[i] != '"') {
      if (k + 1 >= sizeof fd->key) return -1;
      fd->key[k++] = line[i++];
    }
    fd->key[k] = '\0';
    if (k == 0 || i >= len || line[i] != '=') return -1;
    i++;
    char *v = malloc(len + 1);
    if (!v) return -1;
    size_t vn = 0;
    if (i < len && line[i] == '"') {
      i++;
      int closed = 0;
      while (i < len) {
        char c = line[i++];
        if (c == '"') {
          closed = 1;
          break;
        }
        if ((unsigned char)c < 0x20 || c == 0x7f) goto bad; /* raw control char */
        if (c != '\\') {
          v[vn++] = c;
          continue;
        }
        if (i >= len) goto bad;
        char e = line[i++];
        switch (e) {
          case '"': v[vn++] = '"'; break;
          case '\\': v[vn++] = '\\'; break;
          case 'n': v[vn++] = '\n'; break;
          case 't': v[vn++] = '\t'; break;
          case 'x': {
            if (i + 2 > len) goto bad;
            int hi = hexval(line[i]), lo = hexval(line[i + 1]);
            if (hi < 0 || lo < 0) goto bad;
            v[vn++] = (char)(hi * 16 + lo);
            i += 2;
            break;
          }
          default: goto bad;
        }
      }
      if (!closed) goto bad;
    } else {
      while (i < len && line[i] != ' ') {
        char c = line[i++];
        if (c == '"' || c == '=' || (unsigned char)c < 0x20 || c == 0x7f) goto bad;
        v[vn++] = c;
      }
      if (vn == 0) goto bad; /* an empty value must be written "" */
    }
    v[vn] = '\0';
    fd->value = v;
    out->n++;
    if (i < len) {
      if (line[i] != ' ') return -1;
      i++;
      if (i == len) return -1; /* trailing space */
    }
    continue;
  bad:
    free(v);
    return -1;
  }
  return 0;
}

static const char *get(const fields_t *fs, const char *key) {
  for (int i = 0; i < fs->n; i++) {
    if (strcmp(fs->f[i].key, key) == 0) return fs->f[i].value;
  }
  return NULL;
}

/* Splits `text` into lines; every line must end in '\n'. Returns the line count. */
static int count_lines(const char *text) {
  int n = 0;
  size_t len = strlen(text);
  if (len) assert_int_equal(text[len - 1], '\n');
  for (size_t i = 0; i < len; i++) n += text[i] == '\n';
  return n;
}

/* Parses the single line that must be in the pipe now, checks the fixed prefix
 * (ts=, level=, event= in that order), and returns the fields. */
static void read_one_line(fields_t *fs, const char *level, const char *event) {
  const char *text = drain();
  if (count_lines(text) != 1) fail_msg("expected exactly one line, got [%s]", text);
  if (parse_line(text, captured_len - 1, fs) != 0) fail_msg("malformed logfmt line [%s]", text);
  assert_true(fs->n >= 3);
  assert_string_equal(fs->f[0].key, "ts");
  assert_string_equal(fs->f[1].key, "level");
  assert_string_equal(fs->f[1].value, level);
  assert_string_equal(fs->f[2].key, "event");
  assert_string_equal(fs->f[2].value, event);
}

/* ---- tests ---- */

static void test_line_shape_and_fields(void **state) {
  (void)state;
  kiln_log(KILN_LOG_INFO, "rpc", "method=%s code=%s n=%d", "/kiln.v1.Kiln/GetStats", "OK", 42);
  fields_t fs;
  read_one_line(&fs, "info", "rpc");
  assert_int_equal(fs.n, 6);
  assert_string_equal(fs.f[3].key, "method");
  assert_string_equal(fs.f[3].value, "/kiln.v1.Kiln/GetStats");
  assert_string_equal(fs.f[4].key, "code");
  assert_string_equal(fs.f[4].value, "OK");
  assert_string_equal(fs.f[5].key, "n");
  assert_string_equal(fs.f[5].value, "42");
  fields_free(&fs);
}

static void test_timestamp_is_utc_now_with_millis(void **state) {
  (void)state;
  time_t before = time(NULL);
  kiln_log(KILN_LOG_WARN, "tick", NULL);
  time_t after = time(NULL);
  fields_t fs;
  read_one_line(&fs, "warn", "tick");
  const char *ts = get(&fs, "ts");
  /* 2026-11-30T10:00:00.123Z */
  assert_int_equal(strlen(ts), 24);
  struct tm tm = {0};
  int ms = -1;
  char z = 0;
  assert_int_equal(sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                          &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms, &z),
                   8);
  assert_int_equal(z, 'Z');
  assert_true(ms >= 0 && ms <= 999);
  assert_int_equal(ts[4], '-');
  assert_int_equal(ts[10], 'T');
  assert_int_equal(ts[19], '.');
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  time_t t = timegm(&tm);
  assert_true(t >= before - 2 && t <= after + 2);
  fields_free(&fs);
}

static void test_no_fields(void **state) {
  (void)state;
  kiln_log(KILN_LOG_INFO, "started", NULL);
  fields_t fs;
  read_one_line(&fs, "info", "started");
  assert_int_equal(fs.n, 3);
  fields_free(&fs);
}

static void test_level_filtering_at_info(void **state) {
  (void)state;
  kiln_log_configure(KILN_LOG_INFO, pipe_fds[1]);
  kiln_log(KILN_LOG_DEBUG, "dropped", "x=1");
  assert_string_equal(drain(), "");
  kiln_log(KILN_LOG_DEBUG, "dropped", "x=1");
  kiln_log(KILN_LOG_INFO, "e1", NULL);
  kiln_log(KILN_LOG_DEBUG, "dropped", "x=2");
  kiln_log(KILN_LOG_WARN, "e2", NULL);
  kiln_log(KILN_LOG_ERROR, "e3", NULL);
  const char *text = drain();
  assert_int_equal(count_lines(text), 3);
  assert_null(strstr(text, "dropped"));
  assert_null(strstr(text, "level=debug"));
  assert_non_null(strstr(text, "level=info event=e1"));
  assert_non_null(strstr(text, "level=warn event=e2"));
  assert_non_null(strstr(text, "level=error event=e3"));
}

static void test_level_filtering_other_levels(void **state) {
  (void)state;
  static const struct {
    kiln_log_level_t min;
    int lines;
  } cases[] = {
      {KILN_LOG_DEBUG, 4}, {KILN_LOG_INFO, 3}, {KILN_LOG_WARN, 2}, {KILN_LOG_ERROR, 1}, {KILN_LOG_OFF, 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    kiln_log_configure(cases[c].min, pipe_fds[1]);
    for (int lvl = KILN_LOG_DEBUG; lvl <= KILN_LOG_OFF; lvl++) {
      kiln_log((kiln_log_level_t)lvl, "e", "lvl=%d", lvl);
      /* OFF is a threshold, never a level lines are written at. */
      int want = lvl >= (int)cases[c].min && lvl < KILN_LOG_OFF;
      assert_int_equal(!!kiln_log_enabled((kiln_log_level_t)lvl), want);
    }
    const char *text = drain();
    if (count_lines(text) != cases[c].lines) {
      fail_msg("min level %d: expected %d lines, got [%s]", (int)cases[c].min, cases[c].lines, text);
    }
  }
}

static int evaluated;
static int count_evaluation(void) { return ++evaluated; }

/* kiln_log and kiln_log_status evaluate their field arguments only when the level
 * is enabled: a disabled debug line costs the level check, nothing more. */
static void test_arguments_evaluated_only_when_enabled(void **state) {
  (void)state;
  kiln_log_configure(KILN_LOG_INFO, pipe_fds[1]);
  evaluated = 0;
  kiln_log(KILN_LOG_DEBUG, "lazy", "n=%d", count_evaluation());
  kiln_status_t st = KILN_STATUS(KILN_STATUS_INTERNAL, "boom");
  kiln_log_status(KILN_LOG_DEBUG, "lazy", st, "n=%d", count_evaluation());
  assert_int_equal(evaluated, 0);
  assert_string_equal(drain(), "");
  kiln_log(KILN_LOG_INFO, "eager", "n=%d", count_evaluation());
  kiln_log_status(KILN_LOG_WARN, "eager", st, "n=%d", count_evaluation());
  assert_int_equal(evaluated, 2);
  const char *text = drain();
  assert_int_equal(count_lines(text), 2);
  assert_non_null(strstr(text, "event=eager n=1"));
  assert_non_null(strstr(text, "event=eager n=2"));
  kiln_status_free(st);
}

static void test_debug_written_when_enabled(void **state) {
  (void)state;
  kiln_log_configure(KILN_LOG_DEBUG, pipe_fds[1]);
  kiln_log(KILN_LOG_DEBUG, "detail", "k=v");
  fields_t fs;
  read_one_line(&fs, "debug", "detail");
  assert_string_equal(get(&fs, "k"), "v");
  fields_free(&fs);
}

static void test_log_status_fields(void **state) {
  (void)state;
  int line = __LINE__ + 1;
  kiln_status_t st = KILN_STATUS(KILN_STATUS_NOT_FOUND, "artifact \"%s\" not found\tin cache\\db", "k1");
  kiln_log_status(KILN_LOG_ERROR, "get_failed", st, "key=%s", "k1");
  fields_t fs;
  read_one_line(&fs, "error", "get_failed");
  assert_int_equal(fs.n, 7);
  /* The caller's fields come before the status fields. */
  assert_string_equal(fs.f[3].key, "key");
  assert_string_equal(fs.f[3].value, "k1");
  assert_string_equal(fs.f[4].key, "code");
  assert_string_equal(fs.f[4].value, "NOT_FOUND");
  assert_string_equal(fs.f[5].key, "msg");
  assert_string_equal(fs.f[5].value, kiln_status_message(st));
  assert_string_equal(fs.f[6].key, "at");
  char where[64];
  snprintf(where, sizeof where, "test_log.c:%d", line);
  assert_string_equal(fs.f[6].value, where);
  fields_free(&fs);
  /* Still owned by us: logging must not free it (ASan catches a double free). */
  assert_int_equal(kiln_status_code(st), KILN_STATUS_NOT_FOUND);
  kiln_status_free(st);
}

static void test_log_status_bare_msg_and_no_fields(void **state) {
  (void)state;
  kiln_status_t st = KILN_STATUS(KILN_STATUS_UNAVAILABLE, "busy");
  kiln_log_status(KILN_LOG_WARN, "retry", st, NULL);
  const char *text = drain();
  /* A message with nothing to escape is written bare. */
  assert_non_null(strstr(text, " code=UNAVAILABLE msg=busy at=test_log.c:"));
  fields_t fs;
  assert_int_equal(parse_line(text, captured_len - 1, &fs), 0);
  assert_int_equal(fs.n, 6);
  assert_string_equal(get(&fs, "code"), "UNAVAILABLE");
  assert_string_equal(get(&fs, "msg"), "busy");
  assert_string_equal(get(&fs, "at"), kiln_status_where(st));
  fields_free(&fs);

  /* Filtered like any other line. */
  kiln_log_status(KILN_LOG_DEBUG, "retry", st, NULL);
  assert_string_equal(drain(), "");
  kiln_status_free(st);
}

static void test_kv_str_quoting(void **state) {
  (void)state;
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_log_kv_str(&b, "path", "/tmp/x");
  kiln_log_kv_str(&b, "name", "two words");
  kiln_log_kv_str(&b, "empty", "");
  kiln_log_kv_str(&b, "null", NULL);
  kiln_log_kv_str(&b, "q", "say \"hi\"");
  assert_string_equal(b.data, " path=/tmp/x name=\"two words\" empty=\"\" null=\"\" q=\"say \\\"hi\\\"\"");
  kiln_buf_deinit(&b);
}

static void test_kv_str_values_round_trip(void **state) {
  (void)state;
  static const char *const values[] = {
      "plain",     "",         "a b",         "tab\there", "nl\nnext",
      "cr\rx",     "quote\"d", "back\\slash", "k=v",       "\x01\x02\x1f\x7f",
      "trailing ", " leading", "caf\xc3\xa9", "\"\\\"",
  };
  enum { N = sizeof values / sizeof values[0] };
  kiln_buf_t b;
  kiln_buf_init(&b);
  char key[16];
  for (size_t i = 0; i < N; i++) {
    snprintf(key, sizeof key, "v%zu", i);
    kiln_log_kv_str(&b, key, values[i]);
  }
  kiln_log_fields(KILN_LOG_INFO, "values", &b);
  kiln_buf_deinit(&b);

  fields_t fs;
  /* One line even though values contain newlines. */
  read_one_line(&fs, "info", "values");
  assert_int_equal(fs.n, 3 + N);
  for (size_t i = 0; i < N; i++) {
    snprintf(key, sizeof key, "v%zu", i);
    assert_string_equal(fs.f[3 + i].key, key);
    assert_string_equal(fs.f[3 + i].value, values[i]);
  }
  fields_free(&fs);
}

static void test_log_fields_spacing(void **state) {
  (void)state;
  kiln_buf_t b;
  kiln_buf_init(&b);
  /* Without a leading space one is inserted; with one, none is added. */
  kiln_buf_append_str(&b, "a=1 b=2");
  kiln_log_fields(KILN_LOG_INFO, "ev", &b);
  fields_t fs;
  read_one_line(&fs, "info", "ev");
  assert_int_equal(fs.n, 5);
  assert_string_equal(get(&fs, "a"), "1");
  assert_string_equal(get(&fs, "b"), "2");
  fields_free(&fs);

  kiln_buf_clear(&b);
  kiln_log_kv_str(&b, "c", "3");
  kiln_log_fields(KILN_LOG_INFO, "ev", &b);
  read_one_line(&fs, "info", "ev"); /* the strict parser rejects a double space */
  assert_int_equal(fs.n, 4);
  assert_string_equal(get(&fs, "c"), "3");
  fields_free(&fs);

  kiln_buf_clear(&b);
  kiln_log_fields(KILN_LOG_INFO, "ev", &b);
  read_one_line(&fs, "info", "ev");
  assert_int_equal(fs.n, 3);
  fields_free(&fs);

  /* Filtered. */
  kiln_log_kv_str(&b, "c", "3");
  kiln_log_fields(KILN_LOG_DEBUG, "ev", &b);
  assert_string_equal(drain(), "");
  kiln_buf_deinit(&b);
}

static void test_many_and_long_lines(void **state) {
  (void)state;
  for (int i = 0; i < 200; i++) kiln_log(KILN_LOG_INFO, "n", "i=%d", i);
  const char *text = drain();
  assert_int_equal(count_lines(text), 200);
  const char *p = text;
  for (int i = 0; i < 200; i++) {
    const char *nl = strchr(p, '\n');
    fields_t fs;
    assert_int_equal(parse_line(p, (size_t)(nl - p), &fs), 0);
    char want[16];
    snprintf(want, sizeof want, "%d", i);
    assert_string_equal(get(&fs, "i"), want);
    fields_free(&fs);
    p = nl + 1;
  }

  char *big = malloc(20001);
  assert_non_null(big);
  memset(big, 'L', 20000);
  big[20000] = '\0';
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_log_kv_str(&b, "big", big);
  kiln_log_fields(KILN_LOG_ERROR, "long", &b);
  kiln_buf_deinit(&b);
  fields_t fs;
  read_one_line(&fs, "error", "long");
  assert_string_equal(get(&fs, "big"), big);
  fields_free(&fs);
  free(big);
}

static void test_level_parse_and_names(void **state) {
  (void)state;
  static const struct {
    const char *name;
    kiln_log_level_t level;
  } ok[] = {
      {"debug", KILN_LOG_DEBUG}, {"info", KILN_LOG_INFO}, {"warn", KILN_LOG_WARN},
      {"error", KILN_LOG_ERROR}, {"off", KILN_LOG_OFF},   {"warning", KILN_LOG_WARN},
      {"DEBUG", KILN_LOG_DEBUG}, {"Info", KILN_LOG_INFO}, {"WARNING", KILN_LOG_WARN},
      {"Error", KILN_LOG_ERROR}, {"OFF", KILN_LOG_OFF},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    kiln_log_level_t lvl = (kiln_log_level_t)99;
    if (kiln_log_level_parse(ok[i].name, &lvl) != 0) fail_msg("rejected %s", ok[i].name);
    assert_int_equal(lvl, ok[i].level);
  }
  static const char *const bad[] = {"",      "verbose", "warnings", "inf", "trace",
                                    "fatal", "info ",   " info",    "0",   "1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kiln_log_level_t lvl = KILN_LOG_ERROR;
    if (kiln_log_level_parse(bad[i], &lvl) != -1) fail_msg("accepted [%s]", bad[i]);
    assert_int_equal(lvl, KILN_LOG_ERROR);
  }
  kiln_log_level_t lvl = KILN_LOG_ERROR;
  assert_int_equal(kiln_log_level_parse(NULL, &lvl), -1);
  assert_int_equal(lvl, KILN_LOG_ERROR);

  /* Names round-trip through parse. */
  for (int l = KILN_LOG_DEBUG; l <= KILN_LOG_OFF; l++) {
    const char *name = kiln_log_level_name((kiln_log_level_t)l);
    kiln_log_level_t back = (kiln_log_level_t)99;
    assert_int_equal(kiln_log_level_parse(name, &back), 0);
    assert_int_equal(back, l);
  }
  assert_string_equal(kiln_log_level_name(KILN_LOG_WARN), "warn");
  assert_string_equal(kiln_log_level_name((kiln_log_level_t)5), "?");
  assert_string_equal(kiln_log_level_name((kiln_log_level_t)-1), "?");
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, test_setup, NULL)
  const struct CMUnitTest tests[] = {
      T(test_line_shape_and_fields),
      T(test_arguments_evaluated_only_when_enabled),
      T(test_timestamp_is_utc_now_with_millis),
      T(test_no_fields),
      T(test_level_filtering_at_info),
      T(test_level_filtering_other_levels),
      T(test_debug_written_when_enabled),
      T(test_log_status_fields),
      T(test_log_status_bare_msg_and_no_fields),
      T(test_kv_str_quoting),
      T(test_kv_str_values_round_trip),
      T(test_log_fields_spacing),
      T(test_many_and_long_lines),
      T(test_level_parse_and_names),
  };
#undef T
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
