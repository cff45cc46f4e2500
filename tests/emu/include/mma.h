/* mma.h for tests/emu: the CPU stand-ins of cuda_emu.h */
#include "tests/emu/cuda_emu.h"
