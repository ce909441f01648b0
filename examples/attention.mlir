// One attention head in TOSA: softmax(Q K^T / sqrt(d)) V for 1 batch, 8 tokens,
// head dimension 16. Q, K, V come in; K is transposed; softmax is written out as
// a front end emits it (max, subtract, exp, sum, reciprocal, multiply).
func.func @attention(%q: tensor<1x8x16xf32>, %k: tensor<1x8x16xf32>, %v: tensor<1x8x16xf32>) -> tensor<1x8x16xf32> {
  %zp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %scale = "tosa.const"() {values = dense<0.25> : tensor<1x1x1xf32>} : () -> tensor<1x1x1xf32>
  %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %kt = tosa.transpose %k {perms = array<i32: 0, 2, 1>} : (tensor<1x8x16xf32>) -> tensor<1x16x8xf32>
  %s = tosa.matmul %q, %kt, %zp, %zp : (tensor<1x8x16xf32>, tensor<1x16x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x8x8xf32>
  %ss = tosa.mul %s, %scale, %shift : (tensor<1x8x8xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x8x8xf32>
  %m = tosa.reduce_max %ss {axis = 2 : i32} : (tensor<1x8x8xf32>) -> tensor<1x8x1xf32>
  %d = tosa.sub %ss, %m : (tensor<1x8x8xf32>, tensor<1x8x1xf32>) -> tensor<1x8x8xf32>
  %e = tosa.exp %d : (tensor<1x8x8xf32>) -> tensor<1x8x8xf32>
  %sum = tosa.reduce_sum %e {axis = 2 : i32} : (tensor<1x8x8xf32>) -> tensor<1x8x1xf32>
  %rs = tosa.reciprocal %sum : (tensor<1x8x1xf32>) -> tensor<1x8x1xf32>
  %p = tosa.mul %e, %rs, %shift : (tensor<1x8x8xf32>, tensor<1x8x1xf32>, tensor<1xi8>) -> tensor<1x8x8xf32>
  %o = tosa.matmul %p, %v, %zp, %zp : (tensor<1x8x8xf32>, tensor<1x8x16xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x8x16xf32>
  return %o : tensor<1x8x16xf32>
}
