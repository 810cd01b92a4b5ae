// bishengir 1.2.0, --target=Ascend910B1: REJECTED with and without the UB options:
//   error: 'tensor.expand_shape' op expected number of static shape dims to be equal to the
//   output rank (2) but found 0 inputs instead
// The rank-1 int8 store of flat_int8_store.mlir, in a kernel that also broadcasts: bishengir
// moves the collapse up to the broadcast and cannot expand it back. So opgen's int8 store is a
// kernel of its own (the row pass returns the float value; RmsNormGradQuant fused this way is
// refused the same way, in its row pass and with dx's stage alone).
// Reproduce: bishengir-compile THIS --enable-hfusion-compile --enable-hivm-compile --target=Ascend910B1 -o out
module {
  func.func @m_k0(%x: tensor<?x?xf32>, %r: tensor<?xf32>) -> (tensor<?xi8>) attributes {hacc.entry, hacc.function_kind = #hacc.function_kind<DEVICE>} {
    %c0 = arith.constant 0 : index
    %N = tensor.dim %x, %c0 : tensor<?x?xf32>
    %c1 = arith.constant 1 : index
    %C = tensor.dim %x, %c1 : tensor<?x?xf32>
    %e0 = tensor.empty(%N, %C) : tensor<?x?xf32>
    %b = linalg.broadcast ins(%r : tensor<?xf32>) outs(%e0 : tensor<?x?xf32>) dimensions = [1]
    %e1 = tensor.empty(%N, %C) : tensor<?x?xf32>
    %w = linalg.elemwise_binary {fun = #linalg.binary_fn<mul>} ins(%x, %b : tensor<?x?xf32>, tensor<?x?xf32>) outs(%e1 : tensor<?x?xf32>) -> tensor<?x?xf32>
    %flat = tensor.collapse_shape %w [[0, 1]] : tensor<?x?xf32> into tensor<?xf32>
    %n = tensor.dim %flat, %c0 : tensor<?xf32>
    %e = tensor.empty(%n) : tensor<?xi8>
    %y = hfusion.cast {round_mode = #hfusion.round_mode<trunc>} ins(%flat : tensor<?xf32>) outs(%e : tensor<?xi8>) -> tensor<?xi8>
    return %y : tensor<?xi8>
  }
}
