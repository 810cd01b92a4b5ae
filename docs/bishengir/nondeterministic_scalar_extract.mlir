// bishengir 1.2.0, --target=Ascend910B1: NOT DETERMINISTIC. RmsNorm forward with eps read by
// tensor.extract and used as the scalar operand of linalg.elemwise_binary. The same file failed
// 6 of 12 runs with
//   error: operand #0 does not dominate this use
// and reached HIVM in the others. With eps broadcast from a rank-0 slice instead (what opgen
// prints), 0 of 12 failed. opgen also retries this message (targets/mlir/bishengir.py).
// Reproduce: for i in $(seq 12); do bishengir-compile THIS --enable-hfusion-compile --enable-hivm-compile --target=Ascend910B1 -o out; done
module {
  func.func @rms_norm_k0(%x: tensor<?x?xf16>, %gamma: tensor<?xf32>, %eps: tensor<1xf32>) -> (tensor<?xf32>, tensor<?x?xf16>) attributes {hacc.entry, hacc.function_kind = #hacc.function_kind<DEVICE>} {
    %c1 = arith.constant 0 : index
    %rows2 = tensor.dim %x, %c1 : tensor<?x?xf16>
    %c3 = arith.constant 1 : index
    %cols4 = tensor.dim %x, %c3 : tensor<?x?xf16>
    %c5 = arith.constant 0.00000000000000000e+00 : f32
    %e6 = tensor.empty(%rows2) : tensor<?xf32>
    %f7 = linalg.fill ins(%c5 : f32) outs(%e6 : tensor<?xf32>) -> tensor<?xf32>
    %e8 = tensor.empty(%rows2, %cols4) : tensor<?x?xf32>
    %cast9 = hfusion.cast ins(%x : tensor<?x?xf16>) outs(%e8 : tensor<?x?xf32>) -> tensor<?x?xf32>
    %e10 = tensor.empty(%rows2, %cols4) : tensor<?x?xf32>
    %cast11 = hfusion.cast ins(%x : tensor<?x?xf16>) outs(%e10 : tensor<?x?xf32>) -> tensor<?x?xf32>
    %e12 = tensor.empty(%rows2, %cols4) : tensor<?x?xf32>
    %w13 = linalg.elemwise_binary {fun = #linalg.binary_fn<mul>} ins(%cast9, %cast11 : tensor<?x?xf32>, tensor<?x?xf32>) outs(%e12 : tensor<?x?xf32>) -> tensor<?x?xf32>
    %rms_norm_sumsq17 = linalg.reduce ins(%w13 : tensor<?x?xf32>) outs(%f7 : tensor<?xf32>) dimensions = [1]
      (%in14: f32, %acc15: f32) {
        %r16 = arith.addf %in14, %acc15 : f32
        linalg.yield %r16 : f32
      }
    %v18 = arith.index_cast %cols4 : index to i64
    %v19 = arith.sitofp %v18 : i64 to f32
    %e20 = tensor.empty(%rows2) : tensor<?xf32>
    %w21 = linalg.elemwise_binary {fun = #linalg.binary_fn<div>} ins(%rms_norm_sumsq17, %v19 : tensor<?xf32>, f32) outs(%e20 : tensor<?xf32>) -> tensor<?xf32>
    %v22 = tensor.extract %eps[%c1] : tensor<1xf32>
    %e23 = tensor.empty(%rows2) : tensor<?xf32>
    %w24 = linalg.elemwise_binary {fun = #linalg.binary_fn<add>} ins(%w21, %v22 : tensor<?xf32>, f32) outs(%e23 : tensor<?xf32>) -> tensor<?xf32>
    %e25 = tensor.empty(%rows2) : tensor<?xf32>
    %u26 = hfusion.elemwise_unary {fun = #hfusion.unary_fn<rsqrt>} ins(%w24 : tensor<?xf32>) outs(%e25 : tensor<?xf32>) -> tensor<?xf32>
    %e27 = tensor.empty(%rows2, %cols4) : tensor<?x?xf32>
    %cast28 = hfusion.cast ins(%x : tensor<?x?xf16>) outs(%e27 : tensor<?x?xf32>) -> tensor<?x?xf32>
    %e29 = tensor.empty(%rows2, %cols4) : tensor<?x?xf32>
    %b30 = linalg.broadcast ins(%u26 : tensor<?xf32>) outs(%e29 : tensor<?x?xf32>) dimensions = [1]
    %e31 = tensor.empty(%rows2, %cols4) : tensor<?x?xf32>
    %w32 = linalg.elemwise_binary {fun = #linalg.binary_fn<mul>} ins(%cast28, %b30 : tensor<?x?xf32>, tensor<?x?xf32>) outs(%e31 : tensor<?x?xf32>) -> tensor<?x?xf32>
    %e33 = tensor.empty(%rows2, %cols4) : tensor<?x?xf32>
    %b34 = linalg.broadcast ins(%gamma : tensor<?xf32>) outs(%e33 : tensor<?x?xf32>) dimensions = [0]
    %e35 = tensor.empty(%rows2, %cols4) : tensor<?x?xf32>
    %w36 = linalg.elemwise_binary {fun = #linalg.binary_fn<mul>} ins(%w32, %b34 : tensor<?x?xf32>, tensor<?x?xf32>) outs(%e35 : tensor<?x?xf32>) -> tensor<?x?xf32>
    %e37 = tensor.empty(%rows2, %cols4) : tensor<?x?xf16>
    %cast38 = hfusion.cast {round_mode = #hfusion.round_mode<rint>} ins(%w36 : tensor<?x?xf32>) outs(%e37 : tensor<?x?xf16>) -> tensor<?x?xf16>
    return %u26, %cast38 : tensor<?xf32>, tensor<?x?xf16>
  }
}
