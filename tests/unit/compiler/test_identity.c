/* Tests for compiler/identity.c: the version carries the codegen revision, the
 * LLVM strings come from the linked LLVM 22 library, all are stable static storage
 * (also under concurrent first use), and the runtime ABI versions are HAL 0.7 and
 * VM bytecode 17.0. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <llvm-c/Core.h>

#include "compiler/identity.h"

/* True when `s` is exactly "<digits>.<digits>.<digits>". */
static int is_release_string(const char *s) {
  int parts = 0;
  while (*s) {
    if (*s < '0' || *s > '9') return 0;
    while (*s >= '0' && *s <= '9') s++;
    parts++;
    if (*s == '.') {
      s++;
      if (!*s) return 0;
    } else if (*s) {
      return 0;
    }
  }
  return parts == 3;
}

static void test_identity_names_llvm_22(void **state) {
  (void)state;
  kiln_compiler_identity_t id;
  memset(&id, 0, sizeof id);
  kiln_compiler_identity_get(&id);
  assert_string_equal(id.name, "kiln-mlir");
  /* "<release>+<12 hex digits of the codegen revision>". */
  assert_non_null(id.version);
  const char *plus = strchr(id.version, '+');
  assert_non_null(plus);
  char release[32];
  assert_true((size_t)(plus - id.version) < sizeof release);
  memcpy(release, id.version, (size_t)(plus - id.version));
  release[plus - id.version] = '\0';
  assert_true(is_release_string(release));
#ifdef KILN_VERSION
  assert_string_equal(release, KILN_VERSION);
#endif
  assert_int_equal(strlen(plus + 1), 12);
  assert_int_equal(strspn(plus + 1, "0123456789abcdef"), 12);
  assert_non_null(id.llvm_version);
  assert_true(strncmp(id.llvm_version, "22.", 3) == 0);
  assert_true(is_release_string(id.llvm_version));
  assert_string_equal(id.mlir_version, id.llvm_version);

  /* It is the loaded library's version, not a constant. */
  unsigned major = 0, minor = 0, patch = 0;
  LLVMGetVersion(&major, &minor, &patch);
  char expected[40];
  snprintf(expected, sizeof expected, "%u.%u.%u", major, minor, patch);
  assert_string_equal(id.llvm_version, expected);
}

static void test_identity_is_stable_static_storage(void **state) {
  (void)state;
  kiln_compiler_identity_t a, b;
  kiln_compiler_identity_get(&a);
  kiln_compiler_identity_get(&b);
  assert_ptr_equal(a.name, b.name);
  assert_ptr_equal(a.version, b.version);
  assert_ptr_equal(a.llvm_version, b.llvm_version);
  assert_ptr_equal(a.mlir_version, b.mlir_version);
}

enum { THREADS = 8 };

static void *get_in_thread(void *arg) {
  kiln_compiler_identity_get((kiln_compiler_identity_t *)arg);
  return NULL;
}

/* Concurrent callers, racing the first call of the process (main runs this test
 * first), all see the same complete string. */
static void test_identity_concurrent(void **state) {
  (void)state;
  pthread_t threads[THREADS];
  kiln_compiler_identity_t ids[THREADS];
  memset(ids, 0, sizeof ids);
  for (int i = 0; i < THREADS; i++) {
    assert_int_equal(pthread_create(&threads[i], NULL, get_in_thread, &ids[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(threads[i], NULL), 0);
  for (int i = 0; i < THREADS; i++) {
    assert_ptr_equal(ids[i].llvm_version, ids[0].llvm_version);
    assert_true(strncmp(ids[i].llvm_version, "22.", 3) == 0);
  }
}

static void test_abi_versions(void **state) {
  (void)state;
  assert_int_equal(KILN_HAL_MODULE_VERSION, 7);
  assert_int_equal(kiln_compiler_hal_module_version(), 7);
  assert_int_equal(KILN_VM_BYTECODE_VERSION_MAJOR, 17);
  assert_int_equal(KILN_VM_BYTECODE_VERSION_MINOR, 0);
  uint32_t bytecode = kiln_compiler_vm_bytecode_version();
  assert_int_equal(bytecode, 0x00110000u);
  assert_int_equal(bytecode >> 16, 17);
  assert_int_equal(bytecode & 0xffffu, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      /* Runs first so the threads race the very first call in this process. */
      cmocka_unit_test(test_identity_concurrent),
      cmocka_unit_test(test_identity_names_llvm_22),
      cmocka_unit_test(test_identity_is_stable_static_storage),
      cmocka_unit_test(test_abi_versions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
