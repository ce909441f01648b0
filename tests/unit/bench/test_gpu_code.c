/* The GPU code readers behind bench_kernels' GPU figures (bench/gpu_code.c), on
 * small texts in each reader's input form: the hottest innermost loop is found
 * and counted, widths and workgroup memory read, other kernels ignored. */
#include "bench/gpu_code.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

static void test_ptx(void **state) {
  (void)state;
  static const char ptx[] =
      ".version 8.4\n"
      ".target sm_89\n"
      ".shared .align 16 .b8 tile_a[8192];\n"
      ".shared .align 16 .b8 other[64];\n"
      ".visible .entry first(\n"
      "\t.param .u64 first_param_0\n"
      ")\n"
      "{\n"
      "\tld.global.b32 \t%r1, [%rd1];\n"
      "$L__BB0_1:\n"
      "\tld.global.b32 \t%r2, [%rd2];\n"
      "\tfma.rn.f32 \t%r3, %r2, %r2, %r3;\n"
      "\t@%p1 bra \t$L__BB0_1;\n"
      "\tret;\n"
      "}\n"
      ".visible .entry hot(\n"
      "\t.param .u64 hot_param_0\n"
      ")\n"
      "{\n"
      "\tld.global.v4.f32 \t{%f1, %f2, %f3, %f4}, [%rd1];\n"
      "\tst.shared.v4.f32 \t[tile_a], {%f1, %f2, %f3, %f4};\n"
      "$L__BB1_1:\n" /* outer loop */
      "\tld.global.b32 \t%r9, [%rd5];\n"
      "$L__BB1_2:\n" /* inner loop: 2 shared loads, 1 global, 4 fma, 1 mma */
      "\tld.shared.f32 \t%f5, [tile_a];\n"
      "\tld.shared.f32 \t%f6, [tile_a+4];\n"
      "\tld.global.nc.b32 \t%r10, [%rd6];\n"
      "\tfma.rn.f32 \t%f7, %f5, %f6, %f7;\n"
      "\tfma.rn.f32 \t%f8, %f5, %f6, %f8;\n"
      "\tfma.rn.f32 \t%f9, %f5, %f6, %f9;\n"
      "\tfma.rn.f32 \t%f10, %f5, %f6, %f10;\n"
      "\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 \t{%f1}, {%r1}, {%r2}, {%f1};\n"
      "\t@%p2 bra \t$L__BB1_2;\n"
      "\tst.global.b32 \t[%rd7], %f7;\n"
      "\t@%p3 bra \t$L__BB1_1;\n"
      "\tshfl.sync.bfly.b32 \t%r11|%p4, %r10, 16, 31, -1;\n"
      "\tshfl.sync.bfly.b32 \t%r12|%p5, %r11, 8, 31, -1;\n"
      "\tbar.sync \t0;\n"
      "\tret;\n"
      "}\n";
  kiln_gpu_code_stats_t s;
  kiln_gpu_code_read_ptx(ptx, "hot", &s);
  assert_true(s.has_loop);
  assert_int_equal(s.loop_loads, 1);
  assert_int_equal(s.loop_shared_loads, 2);
  assert_int_equal(s.loop_stores, 0);
  assert_true(s.loop_madds == 4 + 16.0 * 8 * 16 / 32);
  assert_int_equal(s.load_bits, 128);
  assert_int_equal(s.shared_bytes, 8192); /* `other` is not named in the kernel */
  assert_true(s.matrix);
  assert_int_equal(s.shuffles, 2);
  assert_int_equal(s.barriers, 1);
  assert_int_equal(s.registers, -1);
  kiln_gpu_code_read_ptx(ptx, "first", &s);
  assert_int_equal(s.loop_loads, 1);
  assert_true(s.loop_madds == 1);
  assert_int_equal(s.load_bits, 32);
  assert_int_equal(s.shared_bytes, 0);
  assert_false(s.matrix);
  assert_int_equal(s.shuffles, 0);
  assert_int_equal(s.barriers, 0);
  kiln_gpu_code_read_ptx(ptx, "absent", &s);
  assert_false(s.has_loop);
  assert_true(s.loop_madds == 0);
}

static void test_amdgpu(void **state) {
  (void)state;
  static const char dis[] =
      "\n"
      "0000000000001800 <other>:\n"
      "\ts_endpgm                                                   // 000000001800: BF810000\n"
      "\n"
      "0000000000001900 <k>:\n"
      "\tglobal_load_dwordx4 v[0:3], v[4:5], off                    // 000000001900: DC5C8000 007F0004\n"
      "\tds_read_b32 v6, v7                                         // 000000001908: D86C0000 06000007\n"
      "\tglobal_load_dword v8, v[4:5], off                          // 000000001910: DC508000 087F0004\n"
      "\tv_fmac_f32_e32 v9, v6, v8                                  // 000000001918: 76121106\n"
      "\tv_pk_fma_f32 v[10:11], v[0:1], v[2:3], v[10:11]            // 00000000191C: D3B0400A 1C2A0500\n"
      "\tv_mfma_f32_32x32x8_f16 a[0:15], v[0:1], v[2:3], a[0:15]    // 000000001924: D3D40000 04020500\n"
      "\tglobal_store_dword v[4:5], v9, off                         // 00000000192C: DC708000 007F0904\n"
      "\ts_cbranch_scc1 65529                                       // 000000001934: BF85FFF9 <k+0x8>\n"
      "\tds_bpermute_b32 v1, v2, v3                                 // 000000001938: D8FC0000 01000302\n"
      "\tv_mov_b32_dpp v1, v2 quad_perm:[1,0,3,2] row_mask:0xf bank_mask:0xf // 000000001940: 7E0202FA "
      "FF00B102\n"
      "\ts_barrier                                                  // 000000001948: BF8A0000\n"
      "\ts_endpgm                                                   // 00000000194C: BF810000\n";
  kiln_gpu_code_stats_t s;
  kiln_gpu_code_read_amdgpu(dis, "k", &s);
  assert_true(s.has_loop); /* from ds_read (k+0x8) to the branch */
  assert_int_equal(s.loop_loads, 1);
  assert_int_equal(s.loop_shared_loads, 1);
  assert_int_equal(s.loop_stores, 1);
  assert_true(s.loop_madds == 1 + 2 + 32.0 * 32 * 8 / 64);
  assert_int_equal(s.load_bits, 128);
  assert_true(s.matrix);
  assert_int_equal(s.shuffles, 2);
  assert_int_equal(s.barriers, 1);
  kiln_gpu_code_read_amdgpu(dis, "other", &s);
  assert_false(s.has_loop);
  assert_int_equal(s.load_bits, 0);
  assert_int_equal(s.shuffles, 0);
}

static void test_spirv(void **state) {
  (void)state;
  static const char text[] =
      "               OpEntryPoint GLCompute %k \"k\" %arg0\n"
      "      %float = OpTypeFloat 32\n"
      "    %v4float = OpTypeVector %float 4\n"
      "%_ptr_StorageBuffer_float = OpTypePointer StorageBuffer %float\n"
      "%_ptr_StorageBuffer_v4float = OpTypePointer StorageBuffer %v4float\n"
      "%_ptr_Workgroup_float = OpTypePointer Workgroup %float\n"
      "       %arg0 = OpVariable %_ptr_StorageBuffer_float StorageBuffer\n"
      "       %tile = OpVariable %_ptr_Workgroup_float Workgroup\n"
      "          %k = OpFunction %void None %3\n"
      "          %5 = OpLabel\n"
      "          %6 = OpAccessChain %_ptr_StorageBuffer_v4float %arg0 %uint_0 %c\n"
      "          %7 = OpLoad %v4float %6\n"
      "               OpBranch %10\n"
      "         %10 = OpLabel\n"
      "               OpLoopMerge %12 %11 None\n"
      "               OpBranchConditional %c %11 %12\n"
      "         %11 = OpLabel\n"
      "         %13 = OpAccessChain %_ptr_StorageBuffer_float %arg0 %uint_0 %i\n"
      "         %14 = OpLoad %float %13\n"
      "         %15 = OpLoad %float %tile\n"
      "         %16 = OpFMul %v4float %7 %7\n"
      "         %17 = OpExtInst %float %1 Fma %14 %15 %14\n"
      "               OpStore %13 %17\n"
      "               OpBranch %10\n"
      "         %12 = OpLabel\n"
      "         %18 = OpGroupNonUniformShuffleXor %float %uint_3 %14 %uint_1\n"
      "               OpControlBarrier %uint_2 %uint_2 %uint_264\n"
      "               OpReturn\n"
      "               OpFunctionEnd\n";
  kiln_gpu_code_stats_t s;
  kiln_gpu_code_read_spirv(text, "k", &s);
  assert_true(s.has_loop);
  assert_int_equal(s.loop_loads, 1);
  assert_int_equal(s.loop_shared_loads, 1);
  assert_int_equal(s.loop_stores, 1);
  assert_true(s.loop_madds == 4 + 1);
  assert_int_equal(s.load_bits, 128);
  assert_int_equal(s.shared_bytes, 1); /* one Workgroup variable (bytes unknown) */
  assert_false(s.matrix);
  assert_int_equal(s.shuffles, 1);
  assert_int_equal(s.barriers, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ptx),
      cmocka_unit_test(test_amdgpu),
      cmocka_unit_test(test_spirv),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
