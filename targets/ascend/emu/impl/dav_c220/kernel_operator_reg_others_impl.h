// asc-devkit's Atlas A2/A3 special-register helpers (GetAccVal and friends), which some CANN
// kernels include by this path: the emulation declares what it supports in emu_cann.h.
#include "kernel_operator.h"
