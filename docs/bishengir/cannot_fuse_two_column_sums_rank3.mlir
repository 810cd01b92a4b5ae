// bishengir 1.2.0, --target=Ascend910B1: two sums over the leading axis of rank-3 data in one
// function (GroupNormBackward's dgamma and dbeta sums over N). Each alone reaches HIVM. Together:
//   error: 'func.func' op Failed to create and apply schedule.
//   error: operations cannot be fused
// (LayerNorm's two column sums over rank-2 data fuse.) opgen: one such sum per kernel.
// Reproduce: bishengir-compile THIS --enable-hfusion-compile --enable-hivm-compile --target=Ascend910B1 -o out
module {
  func.func @repro_k0(%mean: tensor<?x?xf32>, %rstd: tensor<?x?xf32>, %group_norm_backward_db: tensor<?x?x?xf32>, %group_norm_backward_ds: tensor<?x?x?xf32>, %size_HW: index) -> (tensor<?x?xf32>, tensor<?x?xf32>) attributes {hacc.entry, hacc.function_kind = #hacc.function_kind<DEVICE>} {
    %c1 = arith.constant 0 : index
    %N2 = tensor.dim %mean, %c1 : tensor<?x?xf32>
    %c3 = arith.constant 1 : index
    %G4 = tensor.dim %mean, %c3 : tensor<?x?xf32>
    %c5 = arith.constant 2 : index
    %D6 = tensor.dim %group_norm_backward_db, %c5 : tensor<?x?x?xf32>
    %c7 = arith.constant 0.00000000000000000e+00 : f32
    %e8 = tensor.empty(%G4, %D6) : tensor<?x?xf32>
    %f9 = linalg.fill ins(%c7 : f32) outs(%e8 : tensor<?x?xf32>) -> tensor<?x?xf32>
    %e10 = tensor.empty(%N2, %G4, %D6) : tensor<?x?x?xf32>
    %b11 = linalg.broadcast ins(%mean : tensor<?x?xf32>) outs(%e10 : tensor<?x?x?xf32>) dimensions = [2]
    %e12 = tensor.empty(%N2, %G4, %D6) : tensor<?x?x?xf32>
    %w13 = linalg.elemwise_binary {fun = #linalg.binary_fn<mul>} ins(%group_norm_backward_db, %b11 : tensor<?x?x?xf32>, tensor<?x?x?xf32>) outs(%e12 : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    %e14 = tensor.empty(%N2, %G4, %D6) : tensor<?x?x?xf32>
    %w15 = linalg.elemwise_binary {fun = #linalg.binary_fn<sub>} ins(%group_norm_backward_ds, %w13 : tensor<?x?x?xf32>, tensor<?x?x?xf32>) outs(%e14 : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    %e16 = tensor.empty(%N2, %G4, %D6) : tensor<?x?x?xf32>
    %b17 = linalg.broadcast ins(%rstd : tensor<?x?xf32>) outs(%e16 : tensor<?x?x?xf32>) dimensions = [2]
    %e18 = tensor.empty(%N2, %G4, %D6) : tensor<?x?x?xf32>
    %w19 = linalg.elemwise_binary {fun = #linalg.binary_fn<mul>} ins(%w15, %b17 : tensor<?x?x?xf32>, tensor<?x?x?xf32>) outs(%e18 : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    %group_norm_backward_dgamma_acc23 = linalg.reduce ins(%w19 : tensor<?x?x?xf32>) outs(%f9 : tensor<?x?xf32>) dimensions = [0]
      (%in20: f32, %acc21: f32) {
        %r22 = arith.addf %in20, %acc21 : f32
        linalg.yield %r22 : f32
      }
    %e24 = tensor.empty(%G4, %D6) : tensor<?x?xf32>
    %f25 = linalg.fill ins(%c7 : f32) outs(%e24 : tensor<?x?xf32>) -> tensor<?x?xf32>
    %group_norm_backward_dbeta_acc29 = linalg.reduce ins(%group_norm_backward_db : tensor<?x?x?xf32>) outs(%f25 : tensor<?x?xf32>) dimensions = [0]
      (%in26: f32, %acc27: f32) {
        %r28 = arith.addf %in26, %acc27 : f32
        linalg.yield %r28 : f32
      }
    return %group_norm_backward_dgamma_acc23, %group_norm_backward_dbeta_acc29 : tensor<?x?xf32>, tensor<?x?xf32>
  }
}
