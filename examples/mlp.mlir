// MLP: relu(x @ W1 + b1) @ W2 + b2 in TOSA, as a front end would emit it.
func.func @mlp(%x: tensor<1x4x16xf32>) -> tensor<1x4x8xf32> {
  %w1 = "tosa.const"() {values = dense<0.5> : tensor<1x16x32xf32>} : () -> tensor<1x16x32xf32>
  %b1 = "tosa.const"() {values = dense<0.1> : tensor<1x1x32xf32>} : () -> tensor<1x1x32xf32>
  %w2 = "tosa.const"() {values = dense<0.25> : tensor<1x32x8xf32>} : () -> tensor<1x32x8xf32>
  %b2 = "tosa.const"() {values = dense<-0.2> : tensor<1x1x8xf32>} : () -> tensor<1x1x8xf32>
  %zp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %h = tosa.matmul %x, %w1, %zp, %zp : (tensor<1x4x16xf32>, tensor<1x16x32xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x32xf32>
  %hb = tosa.add %h, %b1 : (tensor<1x4x32xf32>, tensor<1x1x32xf32>) -> tensor<1x4x32xf32>
  %r = tosa.clamp %hb {min_val = 0.0 : f32, max_val = 3.4028235e38 : f32} : (tensor<1x4x32xf32>) -> tensor<1x4x32xf32>
  %o = tosa.matmul %r, %w2, %zp, %zp : (tensor<1x4x32xf32>, tensor<1x32x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x8xf32>
  %ob = tosa.add %o, %b2 : (tensor<1x4x8xf32>, tensor<1x1x8xf32>) -> tensor<1x4x8xf32>
  return %ob : tensor<1x4x8xf32>
}
