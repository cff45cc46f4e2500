/* nvtx3/nvToolsExt.h for tests/emu: ranges are no-ops */
#ifndef LLM_EMU_NVTX_H
#define LLM_EMU_NVTX_H
static inline int nvtxRangePushA(const char *s) { (void)s; return 0; }
static inline int nvtxRangePop(void) { return 0; }
#endif
