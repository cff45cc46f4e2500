# llmkit — one plain Makefile.
#
# Knobs (make VAR=value):
#   CUDA=auto|0|1|emu  build the CUDA backend (kernels/cuda/*.cu, cuBLAS(Lt)).  auto: when
#                   nvcc is on PATH or in /usr/local/cuda/bin.  Default: auto.  NCCL is
#                   opened at run time (common/nccl_dl.c), not linked.
#   DEBUG=1         -O0 -g3, assertions kept.
#   MPI=auto|0|1    MPI collectives for multi-rank CPU training (common/dist_mpi.c); flags from
#                   `mpicc --showme:compile/link`, else `pkg-config ompi-c`.  auto: when
#                   mpicc is on PATH.  MPI=0 builds everything single-process.  Default: auto.
#   NCCL=auto|0|1|emu  NCCL collectives for multi-GPU training (common/dist_nccl.c); needs
#                   CUDA=1.  auto: when CUDA=1 and nccl.h is found; with CUDA=emu and MPI=1,
#                   emu (NCCL emulated over MPI or shared memory, tests/emu/nccl_emu.cpp).
#                   NCCL_HOME=DIR if not with CUDA.
#   SAN=1           AddressSanitizer + UndefinedBehaviorSanitizer (objects go to build/san).
#   EMU=0|1         make test (check) also builds the emulated CUDA backend (CUDA=emu, in
#                   build/emu, build/san/emu) that tests/cli/gpu_emu.sh checks.  Default: 1.
#   PREFIX=DIR      install root for `make install` (default /usr/local).
#   CC=, NVCC=      compilers.
#
# Targets:
#   all (default)   bin/llm-* and build/libllmkit.a
#   test            build and run every test that needs no GPU; last line "N passed, N failed"
#   check           test under SAN=1, mandoc -Tlint on every page, --help vs man-page check
#   sample          regenerate tests/data/sample.llmk
#   cuda-res        (CUDA=1) ptxas's registers/shared memory per kernel, for
#                   tests/gpu/launch_limits.py
#   fuzz            libFuzzer targets tests/fuzz/fuzz_*.c (clang), each for FUZZ_SECONDS
#   demo            the README's main job
#   install, clean

CUDA   ?= auto
EMU    ?= 1
DEBUG  ?= 0
SAN    ?= 0
PREFIX ?= /usr/local
CC     ?= cc
NVCC   ?= $(shell command -v nvcc 2>/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })

ifeq ($(CUDA),auto)
  ifneq ($(NVCC),)
    CUDA := 1
  else
    CUDA := 0
  endif
endif
# CUDA=emu: the CUDA backend's .cu files compiled by the host C++ compiler against
# tests/emu (kernels run on the CPU, cuBLAS computed on the CPU), into $(B)/emu: a
# GPU-less build of everything CUDA, for tests (see tests/emu/cuda_emu.h).  No nvcc.

VERSION := $(shell git describe --always --dirty --tags 2>/dev/null || echo unknown)

ifeq ($(SAN),1)
  B := build/san
else ifeq ($(DEBUG),1)
  B := build/debug
else
  B := build
endif

ifeq ($(CUDA),emu)
  B := $(B)/emu
endif

OPT      := -O2
ifeq ($(DEBUG),1)
  OPT    := -O0 -g3
endif
SANFLAGS :=
ifeq ($(SAN),1)
  SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  OPT      := -O1 -g
endif

CPPFLAGS += -I. -D_GNU_SOURCE -MMD -MP
CFLAGS   += -std=c11 $(OPT) -g -Wall -Wextra -fopenmp -pthread $(SANFLAGS)
LDFLAGS  += -fopenmp -pthread $(SANFLAGS)
LDLIBS   += -lyaml -lz -lopenblas -lpcre2-8 -ljansson -lm -ldl

ifeq ($(CUDA),1)
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
  CPPFLAGS  += -DLLM_CUDA=1
  NVFLAGS   := -O3 -std=c++17 -I. -DLLM_CUDA=1 -MMD -MP \
               -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
               -gencode arch=compute_90,code=compute_90
  LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -lstdc++
  CU_SRC    := $(wildcard kernels/cuda/*.cu)
else ifeq ($(CUDA),emu)
  CPPFLAGS  += -DLLM_CUDA=1 -DLLM_CUDA_EMU=1
  CU_SRC    := $(wildcard kernels/cuda/*.cu)
  LDLIBS    += -lstdc++
else
  CU_SRC    :=
endif

# ---- distributed: MPI (CPU ranks) and NCCL (GPU ranks) ----
MPI  ?= auto
NCCL ?= auto
MPICC ?= mpicc
ifeq ($(MPI),auto)
  MPI := $(if $(shell command -v $(MPICC) 2>/dev/null),1,0)
endif
ifeq ($(MPI),1)
  MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null || pkg-config --cflags ompi-c 2>/dev/null)
  MPI_LIBS   := $(shell $(MPICC) --showme:link 2>/dev/null || pkg-config --libs ompi-c 2>/dev/null)
  CPPFLAGS   += -DLLM_MPI=1 $(MPI_CFLAGS)
  LDLIBS     += $(MPI_LIBS)
endif
ifeq ($(NCCL),auto)
  NCCL := 0
  ifeq ($(CUDA),1)
    NCCL_HOME ?= $(CUDA_HOME)
    NCCL := $(if $(wildcard $(NCCL_HOME)/include/nccl.h /usr/include/nccl.h),1,0)
  endif
  # the emulated build emulates NCCL over MPI (tests/emu/nccl_emu.cpp) when it has MPI
  ifeq ($(CUDA)$(MPI),emu1)
    NCCL := emu
  endif
endif
ifeq ($(NCCL),1)
  NCCL_HOME ?= $(CUDA_HOME)
  CPPFLAGS  += -DLLM_NCCL=1 -I$(NCCL_HOME)/include -I$(CUDA_HOME)/include
  # not linked: common/nccl_dl.c opens libnccl when a run needs it (run path below)
  LDLIBS    += -Wl,-rpath,$(NCCL_HOME)/lib64
endif

# each object names its CUDA mode (common/build_mode.h); check_mode refuses the objects
# of another (removes them and the target: the next make compiles them for this mode)
CPPFLAGS += -include common/build_mode.h -DLLM_BUILD_MODE='"cuda$(CUDA)"'
check_mode = @bad=$$(grep -L -a -F 'llmkit-build-mode=cuda$(CUDA);' $(filter-out %.cu.o,$(filter %.o,$(1))) </dev/null); \
	if [ -n "$$bad" ]; then rm -f $$bad $@; echo "make: objects of another build mode than CUDA=$(CUDA) (two makes of different modes at once?), removed:" $$bad "-- run make again" >&2; exit 1; fi

LIB_SRC  := $(wildcard common/*.c) $(wildcard kernels/*.c) $(wildcard kernels/cpu/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(B)/%.o) $(CU_SRC:%.cu=$(B)/%.cu.o)
ifeq ($(CUDA),emu)
  LIB_OBJ += $(B)/tests/emu/cuda_emu.o $(B)/tests/emu/cuda_rt.o $(B)/tests/emu/cublas_emu.o
endif
ifeq ($(NCCL),emu)
  CPPFLAGS += -DLLM_NCCL=1
  LIB_OBJ  += $(B)/tests/emu/nccl_emu.o
  # the C sources that call NCCL and the CUDA runtime, against the emulator's headers
  $(B)/common/dist_nccl.o $(B)/common/bench_nccl.o $(B)/common/nccl_dl.o: CPPFLAGS += -Itests/emu/include
endif
LIB      := $(B)/libllmkit.a
CMD_SRC  := $(wildcard cmd/llm-*.c)
ifeq ($(B),build)
  BIN    := bin
else
  BIN    := $(B)/bin
endif
PROGS    := $(CMD_SRC:cmd/%.c=$(BIN)/%)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNITS    := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
TESTUTIL := $(B)/tests/testutil.o
MAN1     := $(wildcard man/man1/*.1)
MAN5     := $(wildcard man/man5/*.5)

.PHONY: all test check sample fuzz demo install clean deps units bench
all: $(PROGS) $(LIB)

# the dist objects depend on MPI=/NCCL=: rebuild them when those change
$(shell mkdir -p $(B) && { echo 'MPI=$(MPI) NCCL=$(NCCL)' | cmp -s - $(B)/dist.flags || echo 'MPI=$(MPI) NCCL=$(NCCL)' >$(B)/dist.flags; })
$(patsubst %.c,$(B)/%.o,$(wildcard common/dist*.c) common/bench_nccl.c common/nccl_dl.c \
    cmd/llm-bench.c tests/unit/test_dlsyms.c tests/unit/test_dist.c): $(B)/dist.flags


# CUDA=0 and CUDA=1 share $(B): a stamp per mode makes a switch rebuild every object
# (they differ in -DLLM_CUDA and in the archive's members).
# (.2: since the objects carry their mode, common/build_mode.h)
# (Made at parse time: with .SECONDARY a missing stamp would not force anything.)
BUILD_STAMP := $(B)/.stamp-cuda$(CUDA).2
ifeq ($(wildcard $(BUILD_STAMP)),)
  $(shell mkdir -p $(B) && rm -f $(B)/.stamp-cuda* && touch $(BUILD_STAMP))
endif

$(B)/%.o: %.c $(BUILD_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@
$(B)/tests/unit/test_dlsyms.o: CPPFLAGS += $(if $(filter 1,$(CUDA)),-I$(CUDA_HOME)/include)

ifeq ($(CUDA),emu)
# every CUDA source rewritten (launches -> emu_call) into $(B)/emu-src, which comes first
# on the include path so that the .cu files include the rewritten headers too
EMU_SRC_IN := $(wildcard kernels/cuda/*.cu kernels/cuda/*.cuh kernels/cuda/*.h tests/gpu/*.cu)
EMU_SRC    := $(EMU_SRC_IN:%=$(B)/emu-src/%)
$(B)/emu-src/%: % tests/emu/unchevron.py
	@mkdir -p $(@D)
	python3 tests/emu/unchevron.py $< $@
$(B)/%.cu.o: $(B)/emu-src/%.cu $(EMU_SRC) $(BUILD_STAMP)
	@mkdir -p $(@D)
	$(CXX) -x c++ -I$(B)/emu-src -Itests/emu/include $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@
else
$(B)/%.cu.o: %.cu $(BUILD_STAMP)
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c $< -o $@
endif

# The version lives in one object that depends on a stamp rewritten when `git describe`
# changes, so every program reports the commit it was built from.
VERSION_STAMP := $(B)/.version
ifneq ($(shell cat $(VERSION_STAMP) 2>/dev/null),$(VERSION))
  $(shell mkdir -p $(B) && echo '$(VERSION)' > $(VERSION_STAMP))
endif
$(B)/common/version.o: CPPFLAGS += -DLLM_VERSION='"$(VERSION)"'
$(B)/common/version.o: $(VERSION_STAMP)

$(LIB): $(LIB_OBJ)
	$(call check_mode,$^)
	@mkdir -p $(@D)
	rm -f $@
	ar rcs $@ $^

$(BIN)/%: $(B)/cmd/%.o $(LIB)
	$(call check_mode,$<)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(TESTUTIL): tests/unit/testutil.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(B)/tests/%: $(B)/tests/unit/%.o $(TESTUTIL) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $< $(TESTUTIL) $(LIB) $(LDLIBS) -lcmocka -o $@

# C++ unit tests (tests/unit/test_*.cpp) run the CUDA backend's device code on the CPU
# through tests/emu (no GPU, no nvcc): kernel headers compile against tests/emu/include.
CXX      ?= g++
CXXFLAGS += -std=c++17 $(OPT) -g -Wall -Wextra -fno-strict-aliasing -Wno-unknown-pragmas -pthread $(SANFLAGS)
UNIT_CXX_SRC := $(wildcard tests/unit/test_*.cpp)
UNITS_CXX    := $(UNIT_CXX_SRC:tests/unit/%.cpp=$(B)/tests/%)
EMU_OBJ      := $(B)/tests/emu/cuda_emu.o $(B)/tests/emu/cuda_rt.o $(B)/tests/emu/cublas_emu.o \
                $(B)/tests/gpu/ref64.o
$(B)/tests/emu/%.o: tests/emu/%.cpp $(BUILD_STAMP)
	@mkdir -p $(@D)
	$(CXX) -Itests/emu/include $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@
$(B)/tests/unit/%.o: tests/unit/%.cpp $(BUILD_STAMP)
	@mkdir -p $(@D)
	$(CXX) -Itests/emu/include $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@
# (In a CUDA=1 build the library's backend objects come along: their CUDA runtime calls
# resolve to the emulator's, linked first, ahead of the shared runtime.)
$(UNITS_CXX): $(B)/tests/%: $(B)/tests/unit/%.o $(EMU_OBJ) $(TESTUTIL) $(LIB)
	@mkdir -p $(@D)
	$(CXX) $(LDFLAGS) $< $(EMU_OBJ) $(TESTUTIL) $(LIB) $(LDLIBS) -lcmocka -o $@

units: $(UNITS) $(UNITS_CXX)

# Benchmarks (never run by `make test`): tests/bench/bench_*.c -> $(B)/bench/bench_*
BENCH_SRC := $(wildcard tests/bench/bench_*.c)
BENCHES   := $(BENCH_SRC:tests/bench/%.c=$(B)/bench/%)
$(B)/bench/%: $(B)/tests/bench/%.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@
bench: $(BENCHES)

# CUDA check program (CUDA=1 only): tests/gpu/*.c + tests/gpu/*.cu -> $(B)/gpu/gpu_check,
# run by scripts/gpu-check.sh.  It also compares with the cpu-ref backend when kernels/cpu
# is in the tree.
ifneq ($(filter 1 emu,$(CUDA)),)
GPU_CHECK := $(B)/gpu/gpu_check
GPU_OBJ   := $(patsubst %.c,$(B)/%.o,$(wildcard tests/gpu/*.c)) \
             $(patsubst %.cu,$(B)/%.cu.o,$(wildcard tests/gpu/*.cu))
$(B)/tests/gpu/gpu_check.o: CPPFLAGS += $(if $(wildcard kernels/cpu/*.c),-DLLM_HAVE_CPU_REF=1)
$(B)/tests/gpu/gpu_check.o: $(wildcard kernels/cpu/cpu_backend.c)
$(GPU_CHECK): $(GPU_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $(GPU_OBJ) $(LIB) $(LDLIBS) -o $@
all: $(GPU_CHECK)
gpu-check: $(GPU_CHECK)
.PHONY: gpu-check
endif

# cuda-res (CUDA=1): what ptxas gives each kernel, per architecture (registers, static
# shared memory, spills: `-Xptxas -v`), and its __launch_bounds__ (.maxntid of the PTX),
# one build/cuda-res/<source>.txt per .cu: the hardware limits tests/gpu/launch_limits.py
# holds the emulator's launches to.  Outside $(B), with no mode stamp: tests run it as
# `make CUDA=1 B=build/cuda-res/b cuda-res`, which leaves the tree's own build alone.
ifeq ($(CUDA),1)
RES_DIR  := build/cuda-res
CUDA_RES := $(patsubst %.cu,$(RES_DIR)/%.txt,$(wildcard kernels/cuda/*.cu tests/gpu/*.cu))
$(RES_DIR)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -Xptxas -v -c $< -o $@ >$(@:.o=.ptxas) 2>&1 || { cat $(@:.o=.ptxas); exit 1; }
$(RES_DIR)/%.txt: $(RES_DIR)/%.o
	$(NVCC) $(filter-out -MMD -MP -gencode arch=%,$(NVFLAGS)) -arch=compute_80 -ptx $*.cu -o $(@:.txt=.ptx)
	{ cat $(<:.o=.ptxas); awk '/^[.]visible .entry|^[.]entry/{n=$$NF; sub(/\(.*/,"",n)} \
	  /^[.]maxntid/{print "maxntid", n, $$2}' $(@:.txt=.ptx) | tr -d ','; } >$@.tmp && mv $@.tmp $@
cuda-res: $(CUDA_RES)
.PHONY: cuda-res
endif

# The test command of the README.  Installs missing Debian packages first (see
# scripts/install-deps.sh), then runs unit, CLI and lint tests through tests/run.sh.
test: deps
	$(MAKE) all units
	$(if $(filter 1,$(EMU)),$(MAKE) CUDA=emu all)
	BIN=$(abspath $(BIN)) UNITDIR=$(abspath $(B)/tests) tests/run.sh

deps:
	@scripts/install-deps.sh --check >/dev/null 2>&1 || scripts/install-deps.sh

check: deps
	$(MAKE) SAN=1 all units
	$(if $(filter 1,$(EMU)),$(MAKE) SAN=1 CUDA=emu all)
	BIN=$(abspath build/san/bin) UNITDIR=$(abspath build/san/tests) LLM_SAN=1 tests/run.sh

sample: $(BIN)/llm-shard $(B)/tests/test_ckpt
	LLM_WRITE_SAMPLE=tests/data/sample.llmk $(B)/tests/test_ckpt

# fuzz: every tests/fuzz/fuzz_*.c (or FUZZ_TARGETS=...), one after the other, each for
# FUZZ_SECONDS, against the library built with clang's fuzzer instrumentation in build/fuzz.
# Corpus: build/fuzz/corpus/TARGET, seeded from tests/fuzz/corpus/TARGET; a dictionary
# tests/fuzz/TARGET.dict, where there is one, is passed as -dict; findings go to
# tests/fuzz/regress/TARGET/ (fuzz_ckpt keeps tests/fuzz/regress/ itself, which
# tests/cli/shard.sh replays; tests/cli/fuzz_replay.sh replays the others).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_FLAGS   ?= -timeout=10
FZ        := build/fuzz
# llm-infer's line limit and --listen's read size made small, so that fuzz_jsonl and
# fuzz_net reach the cutting of over-long lines and the moves of the input buffer; no
# fsync of the files the targets write (common/afile.c: it cost fuzz_llmc, which writes
# a checkpoint per accepted input, two syncs of ~5 ms each)
FZ_LIMITS := -DLLM_INFER_MAX_LINE=256u -DLLM_INFER_NET_READ_CHUNK=32u -DLLM_AFILE_SYNC=0
FZ_CFLAGS := -I. -D_GNU_SOURCE -std=c11 -g -O1 -fno-omit-frame-pointer -fopenmp -pthread $(FZ_LIMITS)
FZ_SAN    := -fno-sanitize-recover=undefined -fsanitize=address,undefined
FZ_OBJ    := $(LIB_SRC:%.c=$(FZ)/obj/%.o)
# the parsers (common/) instrumented by clang; the kernels (not fed by strangers, and
# using GCC-only builtins) by $(CC), uninstrumented
$(FZ)/obj/common/%.o: common/%.c
	@mkdir -p $(@D)
	clang $(FZ_CFLAGS) -Wno-pass-failed $(FZ_SAN),fuzzer-no-link -MMD -MP -c $< -o $@
$(FZ)/obj/kernels/%.o: kernels/%.c
	@mkdir -p $(@D)
	$(CC) -I. -D_GNU_SOURCE -MMD -MP -std=c11 -O2 -g -fopenmp -pthread -c $< -o $@
$(FZ)/libllmkit.a: $(FZ_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(FZ)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_util.h $(FZ)/libllmkit.a
	clang $(FZ_CFLAGS) $(FZ_SAN),fuzzer $< $(FZ)/libllmkit.a -lyaml -lz -lopenblas -lpcre2-8 -ljansson -lm -ldl -o $@
fuzz: $(FUZZ_TARGETS:%=$(FZ)/%)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  reg=tests/fuzz/regress/$$t; [ $$t = fuzz_ckpt ] && reg=tests/fuzz/regress; \
	  mkdir -p $(FZ)/corpus/$$t $$reg; \
	  [ $$t = fuzz_ckpt ] && cp tests/data/*.llmk $(FZ)/corpus/$$t/; \
	  [ -d tests/fuzz/corpus/$$t ] && cp tests/fuzz/corpus/$$t/* $(FZ)/corpus/$$t/; \
	  dict=; [ -f tests/fuzz/$$t.dict ] && dict=-dict=tests/fuzz/$$t.dict; \
	  echo "fuzz: $$t for $(FUZZ_SECONDS)s"; \
	  $(FZ)/$$t $(FUZZ_FLAGS) $$dict -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$$reg/ $(FZ)/corpus/$$t $$reg; \
	done

demo: all
	scripts/demo.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 755 $(PROGS) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(MAN1) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 $(MAN5) $(DESTDIR)$(PREFIX)/share/man/man5/

clean:
	rm -rf build bin

.SECONDARY:
-include $(shell find build -name '*.d' 2>/dev/null)
