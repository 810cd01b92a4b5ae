// bishengir 1.2.0, --target=Ascend910B1: one stage, float16 GroupNorm's sum of squared deviations
// ((x - mean)^2 over HxW, x widened to f32). Default flags and --enable-ubuf-saving alone:
//   error: ub overflow, requires 1642752 bits while 1572864 bits available!
// With --enable-ubuf-saving --hfusion-max-buffer-count-tuning=8 it reaches HIVM (opgen's UB_FLAGS ladder).
// Reproduce: bishengir-compile THIS --enable-hfusion-compile --enable-hivm-compile --target=Ascend910B1 -o out
module {
  func.func @repro_k0(%x: tensor<?x?x?x?xf16>, %group_norm_mean32: tensor<?x?xf32>) -> (tensor<?x?x?xf32>) attributes {hacc.entry, hacc.function_kind = #hacc.function_kind<DEVICE>} {
    %c1 = arith.constant 0 : index
    %N2 = tensor.dim %x, %c1 : tensor<?x?x?x?xf16>
    %c3 = arith.constant 1 : index
    %G4 = tensor.dim %x, %c3 : tensor<?x?x?x?xf16>
    %c5 = arith.constant 2 : index
    %D6 = tensor.dim %x, %c5 : tensor<?x?x?x?xf16>
    %c7 = arith.constant 3 : index
    %HW8 = tensor.dim %x, %c7 : tensor<?x?x?x?xf16>
    %c9 = arith.constant 0.00000000000000000e+00 : f32
    %e10 = tensor.empty(%N2, %G4, %D6) : tensor<?x?x?xf32>
    %f11 = linalg.fill ins(%c9 : f32) outs(%e10 : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    %e12 = tensor.empty(%N2, %G4, %D6, %HW8) : tensor<?x?x?x?xf32>
    %cast13 = hfusion.cast ins(%x : tensor<?x?x?x?xf16>) outs(%e12 : tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32>
    %e14 = tensor.empty(%N2, %G4, %D6, %HW8) : tensor<?x?x?x?xf32>
    %b15 = linalg.broadcast ins(%group_norm_mean32 : tensor<?x?xf32>) outs(%e14 : tensor<?x?x?x?xf32>) dimensions = [2, 3]
    %e16 = tensor.empty(%N2, %G4, %D6, %HW8) : tensor<?x?x?x?xf32>
    %w17 = linalg.elemwise_binary {fun = #linalg.binary_fn<sub>} ins(%cast13, %b15 : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32>) outs(%e16 : tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32>
    %e18 = tensor.empty(%N2, %G4, %D6, %HW8) : tensor<?x?x?x?xf32>
    %w19 = linalg.elemwise_binary {fun = #linalg.binary_fn<mul>} ins(%w17, %w17 : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32>) outs(%e18 : tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32>
    %group_norm_sq23 = linalg.reduce ins(%w19 : tensor<?x?x?x?xf32>) outs(%f11 : tensor<?x?x?xf32>) dimensions = [3]
      (%in20: f32, %acc21: f32) {
        %r22 = arith.addf %in20, %acc21 : f32
        linalg.yield %r22 : f32
      }
    return %group_norm_sq23 : tensor<?x?x?xf32>
  }
}
