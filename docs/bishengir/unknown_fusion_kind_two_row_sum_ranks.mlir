// bishengir 1.2.0 (pip ascendnpu-ir 1.2.0), --target=Ascend910B1: two row reductions of different
// ranks in one function (GroupNormBackward: sum over D of a (N,G,D) tensor, sum over HxW of a
// (N,G,D,HxW) one). Each alone reaches HIVM. Together:
//   error: 'func.func' op Failed to create and apply schedule.
//   error: Unknown kernel fusion kind
// opgen: targets/mlir/named.py puts them in separate kernels (fusion class rows/<rank>).
// Reproduce: bishengir-compile THIS --enable-hfusion-compile --enable-hivm-compile --target=Ascend910B1 -o out
module {
  func.func @repro_k0(%dy: tensor<?x?x?x?xf32>, %x: tensor<?x?x?x?xf32>, %gamma: tensor<?x?xf32>, %group_norm_backward_db: tensor<?x?x?xf32>) -> (tensor<?x?xf32>, tensor<?x?x?xf32>) attributes {hacc.entry, hacc.function_kind = #hacc.function_kind<DEVICE>} {
    %c1 = arith.constant 0 : index
    %N2 = tensor.dim %dy, %c1 : tensor<?x?x?x?xf32>
    %c3 = arith.constant 1 : index
    %G4 = tensor.dim %dy, %c3 : tensor<?x?x?x?xf32>
    %c5 = arith.constant 2 : index
    %D6 = tensor.dim %dy, %c5 : tensor<?x?x?x?xf32>
    %c7 = arith.constant 3 : index
    %HW8 = tensor.dim %dy, %c7 : tensor<?x?x?x?xf32>
    %c9 = arith.constant 0.00000000000000000e+00 : f32
    %e10 = tensor.empty(%N2, %G4) : tensor<?x?xf32>
    %f11 = linalg.fill ins(%c9 : f32) outs(%e10 : tensor<?x?xf32>) -> tensor<?x?xf32>
    %e12 = tensor.empty(%N2, %G4, %D6) : tensor<?x?x?xf32>
    %b13 = linalg.broadcast ins(%gamma : tensor<?x?xf32>) outs(%e12 : tensor<?x?x?xf32>) dimensions = [0]
    %e14 = tensor.empty(%N2, %G4, %D6) : tensor<?x?x?xf32>
    %w15 = linalg.elemwise_binary {fun = #linalg.binary_fn<mul>} ins(%group_norm_backward_db, %b13 : tensor<?x?x?xf32>, tensor<?x?x?xf32>) outs(%e14 : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    %group_norm_backward_sum_db19 = linalg.reduce ins(%w15 : tensor<?x?x?xf32>) outs(%f11 : tensor<?x?xf32>) dimensions = [2]
      (%in16: f32, %acc17: f32) {
        %r18 = arith.addf %in16, %acc17 : f32
        linalg.yield %r18 : f32
      }
    %e20 = tensor.empty(%N2, %G4, %D6) : tensor<?x?x?xf32>
    %f21 = linalg.fill ins(%c9 : f32) outs(%e20 : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    %e22 = tensor.empty(%N2, %G4, %D6, %HW8) : tensor<?x?x?x?xf32>
    %w23 = linalg.elemwise_binary {fun = #linalg.binary_fn<mul>} ins(%dy, %x : tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32>) outs(%e22 : tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32>
    %group_norm_backward_ds27 = linalg.reduce ins(%w23 : tensor<?x?x?x?xf32>) outs(%f21 : tensor<?x?x?xf32>) dimensions = [3]
      (%in24: f32, %acc25: f32) {
        %r26 = arith.addf %in24, %acc25 : f32
        linalg.yield %r26 : f32
      }
    return %group_norm_backward_sum_db19, %group_norm_backward_ds27 : tensor<?x?xf32>, tensor<?x?x?xf32>
  }
}
