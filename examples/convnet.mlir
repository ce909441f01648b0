// A small convolution network in TOSA: conv2d + bias + relu, depthwise conv,
// max pooling, then average pooling down to one value per channel.
// Input NHWC 1x16x16x3; output 1x1x1x8.
func.func @convnet(%x: tensor<1x16x16x3xf32>) -> tensor<1x1x1x8xf32> {
  %w1 = "tosa.const"() {values = dense<0.05> : tensor<8x3x3x3xf32>} : () -> tensor<8x3x3x3xf32>
  %b1 = "tosa.const"() {values = dense<0.01> : tensor<8xf32>} : () -> tensor<8xf32>
  %w2 = "tosa.const"() {values = dense<0.1> : tensor<3x3x8x1xf32>} : () -> tensor<3x3x8x1xf32>
  %b2 = "tosa.const"() {values = dense<0.0> : tensor<8xf32>} : () -> tensor<8xf32>
  %zp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %c1 = tosa.conv2d %x, %w1, %b1, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x16x16x3xf32>, tensor<8x3x3x3xf32>, tensor<8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x16x16x8xf32>
  %r1 = tosa.clamp %c1 {min_val = 0.0 : f32, max_val = 3.4028235e38 : f32} : (tensor<1x16x16x8xf32>) -> tensor<1x16x16x8xf32>
  %d1 = tosa.depthwise_conv2d %r1, %w2, %b2, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x16x16x8xf32>, tensor<3x3x8x1xf32>, tensor<8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x16x16x8xf32>
  %p1 = tosa.max_pool2d %d1 {kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x16x16x8xf32>) -> tensor<1x8x8x8xf32>
  %p2 = tosa.avg_pool2d %p1, %zp, %zp {acc_type = f32, kernel = array<i64: 8, 8>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 8, 8>} : (tensor<1x8x8x8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x1x1x8xf32>
  return %p2 : tensor<1x1x1x8xf32>
}
