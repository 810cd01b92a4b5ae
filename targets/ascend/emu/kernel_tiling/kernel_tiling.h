// opgen AscendC emulation: <kernel_tiling/kernel_tiling.h>, which CANN's build generates with the
// tiling structs of the advanced APIs. CANN's kernels compared here (opgen compare --against
// cann-src) take their own tiling struct from the op's tiling header (cann_src.struct_source,
// force-included), so this header only has to exist.
#ifndef OPGEN_EMU_KERNEL_TILING_H
#define OPGEN_EMU_KERNEL_TILING_H
#include "kernel_operator.h"
#endif
