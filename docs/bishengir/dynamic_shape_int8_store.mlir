// bishengir 1.2.0, --target=Ascend910B1: REJECTED in every run (5 of 5 for the f32 and the f16 form).
// A dynamic-shape int8 output: float32 -> int8 by hfusion.cast (round_mode rint, or trunc, or
// none; or through i32) fails with
//   error: 'hivm.hir.store' op only support store ub to gm currently!
// and from half (the AscendC route: f32 -> f16 -> i8) with
//   error: operand #0 does not dominate this use
// The same file with a static shape (tensor<16x64xf32> -> tensor<16x64xi8>) reaches HIVM, as does
// f16 -> i8 with no round_mode at 16x64, and so does this file with bishengir-compile-a5
// --target=Ascend950PR_9579 (which this target does not drive). RmsNormGradQuant's int8 dx
// is such a store: opgen prints it as flat_int8_store.mlir instead (a kernel of its own,
// rank 1), which reaches HIVM on 910B1.
// Reproduce: bishengir-compile THIS --enable-hfusion-compile --enable-hivm-compile --target=Ascend910B1 -o out
module {
  func.func @m_k0(%x: tensor<?x?xf32>) -> (tensor<?x?xi8>) attributes {hacc.entry, hacc.function_kind = #hacc.function_kind<DEVICE>} {
    %c0 = arith.constant 0 : index
    %N = tensor.dim %x, %c0 : tensor<?x?xf32>
    %c1 = arith.constant 1 : index
    %C = tensor.dim %x, %c1 : tensor<?x?xf32>
    %e = tensor.empty(%N, %C) : tensor<?x?xi8>
    %y = hfusion.cast {round_mode = #hfusion.round_mode<rint>} ins(%x : tensor<?x?xf32>) outs(%e : tensor<?x?xi8>) -> tensor<?x?xi8>
    return %y : tensor<?x?xi8>
  }
}
