// bishengir 1.2.0 (pip ascendnpu-ir), Ascend910B1: "ub overflow, requires ... bits while 1572864 bits
// available", with and without --enable-ubuf-saving. A float16 tensor of dynamic shape, widened
// to float32 and summed over its last axis; the same kernel on float32 input reaches HIVM.
// Reproduce: python -m opgen.targets.mlir.bishengir docs/bishengir/ub_overflow_f16_row_sum.mlir Ascend910B1
module {
  func.func @row_sum(%x: tensor<?x?x?x?xf16>) -> tensor<?x?x?xf32> attributes {hacc.entry, hacc.function_kind = #hacc.function_kind<DEVICE>} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %n = tensor.dim %x, %c0 : tensor<?x?x?x?xf16>
    %g = tensor.dim %x, %c1 : tensor<?x?x?x?xf16>
    %d = tensor.dim %x, %c2 : tensor<?x?x?x?xf16>
    %hw = tensor.dim %x, %c3 : tensor<?x?x?x?xf16>
    %wide = tensor.empty(%n, %g, %d, %hw) : tensor<?x?x?x?xf32>
    %xf = hfusion.cast ins(%x : tensor<?x?x?x?xf16>) outs(%wide : tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32>
    %zero = arith.constant 0.0 : f32
    %init = tensor.empty(%n, %g, %d) : tensor<?x?x?xf32>
    %start = linalg.fill ins(%zero : f32) outs(%init : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    %sum = linalg.reduce ins(%xf : tensor<?x?x?x?xf32>) outs(%start : tensor<?x?x?xf32>) dimensions = [3]
      (%in: f32, %acc: f32) {
        %s = arith.addf %in, %acc : f32
        linalg.yield %s : f32
      }
    return %sum : tensor<?x?x?xf32>
  }
}
