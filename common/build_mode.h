/* build_mode.h — included into every C and C++ object by the Makefile (-include), never
 * by a source file: each object carries the build mode it was compiled for (CUDA=0|1|emu
 * change what many files compile), and the Makefile's archive and link rules refuse
 * objects of another mode.  Modes share build/ and a stamp makes a switch rebuild
 * everything, but two makes of different modes at once in one tree leave objects of
 * one newer than the other's stamp: once, a CUDA=1 program linked cuBLAS around a
 * CPU-only backend, silently. */
#ifndef LLM_BUILD_MODE_H
#define LLM_BUILD_MODE_H
#ifdef LLM_BUILD_MODE
__attribute__((used)) static const char llm_build_mode_tag[] = "llmkit-build-mode=" LLM_BUILD_MODE ";";
#endif
#endif
