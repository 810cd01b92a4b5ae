// opgen AscendC emulation: asc-devkit's include/basic_api/kernel_type.h (the DT_* data-type
// numbers of the GE runtime) is not emulated; CANN's kernels compared here include it for
// nothing they use. A kernel that uses a DT_* number fails to compile against it.
#ifndef OPGEN_EMU_KERNEL_TYPE_H
#define OPGEN_EMU_KERNEL_TYPE_H
#include "kernel_operator.h"
#endif
