// bishengir 1.2.0, --target=Ascend910B1: ACCEPTED (reaches HIVM) with the UB options opgen
// retries (--enable-ubuf-saving --hfusion-max-buffer-count-tuning=8); with none it is
// "ub overflow, requires 2552576 bits while 1572864 bits available!".
// The int8 store dynamic_shape_int8_store.mlir is refused ("'hivm.hir.store' op only support
// store ub to gm currently!"), as a kernel of its own: the float value read as an argument,
// collapsed to rank 1, cast, returned at rank 1 (on the device the same bytes in GM as the
// rank-2 output). What opgen prints for an 8-bit integer output of rank >= 2
// (targets/mlir/named.py, split_narrow_stores): RmsNormGradQuant's dx.
// A collapse after a broadcast in the same kernel is refused instead:
// flat_int8_store_after_broadcast.mlir.
// Reproduce: bishengir-compile THIS --enable-hfusion-compile --enable-hivm-compile --target=Ascend910B1
//            --enable-ubuf-saving --hfusion-max-buffer-count-tuning=8 -o out
module {
  func.func @m_k1(%dx_value: tensor<?x?xf32>) -> (tensor<?xi8>) attributes {hacc.entry, hacc.function_kind = #hacc.function_kind<DEVICE>} {
    %c0 = arith.constant 0 : index
    %flat = tensor.collapse_shape %dx_value [[0, 1]] : tensor<?x?xf32> into tensor<?xf32>
    %n = tensor.dim %flat, %c0 : tensor<?xf32>
    %e = tensor.empty(%n) : tensor<?xi8>
    %y = hfusion.cast {round_mode = #hfusion.round_mode<trunc>} ins(%flat : tensor<?xf32>) outs(%e : tensor<?xi8>) -> tensor<?xi8>
    return %y : tensor<?xi8>
  }
}
