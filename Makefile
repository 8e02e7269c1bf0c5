# hyperfarm — top-level, non-recursive build.
#
#   make                      build every program the machine can build (bin/)
#   make test                 build, then run unit, system and browser tests
#   make SANITIZE=address,undefined test
#                             the same under ASan+UBSan (objects in build/san/)
#   make demo                 scheduler + local agent + a Fashion-MNIST sweep
#   make bench                every benchmark in bench/, ours beside the peer's
#   make fuzz                 each libFuzzer target for FUZZ_SECONDS (clang)
#   make help                 every target, and how to run one test
#   CUDA=0|1                  force the CUDA backend off/on (default: on when nvcc exists)
#
# Two stages. The flags of the libraries come from pkg-config, which make
# evaluates while it reads this file, so on a fresh machine they must be
# installed before that: the first stage (below) only runs
# scripts/install-deps and then runs make again with HF_MAKE_STAGE=build,
# which reads the rest of this file with the packages in place. `make help`
# and `make clean` skip the install.
#
# Layout of a module: every dir/*.c except dir/main.c goes into
# build/<variant>/lib<dir>.a; dir/main.c is the program's entry point.
# Unit tests tests/unit/test_*.c link every library, so a test names no
# dependencies by hand.

SHELL := /bin/bash
ifeq ($(HF_MAKE_STAGE),)
NODEPS_GOALS := help clean
HF_NEED_DEPS := $(if $(MAKECMDGOALS),$(filter-out $(NODEPS_GOALS),$(MAKECMDGOALS)),all)
.DEFAULT_GOAL := hf-stage1
.PHONY: hf-stage1 $(MAKECMDGOALS)
hf-stage1:
	@$(if $(HF_NEED_DEPS),scripts/install-deps --check,true)
	@$(MAKE) --no-print-directory HF_MAKE_STAGE=build $(MAKECMDGOALS)
$(MAKECMDGOALS): hf-stage1
	@:
else
.DEFAULT_GOAL := all
# Quiet by default ("  CC file"); make V=1 shows full command lines.
ifeq ($(V),1)
  Q :=
  say = @true
else
  Q := @
  say = @printf '  %-6s %s\n' $(1) $(2)
endif

NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= /usr/local/cuda
ifeq ($(origin CUDA),undefined)
  CUDA := $(if $(NVCC),1,0)
  ifeq ($(CUDA),0)
    $(info hyperfarm: nvcc not found: the trainer is built CPU-only (no CUDA backend, no NCCL))
  endif
endif
MPICC_OK := $(shell pkg-config --exists ompi-c && echo 1)

ifneq ($(SANITIZE),)
  VARIANT := san
  # HF_ASSERT aborts here (common/hf_assert.h); release builds log and count.
  SANFLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all -DHF_ASSERT_ABORT
  OPT := -O1 -g
else
  VARIANT := rel
  SANFLAGS :=
  OPT := -O2 -g
endif
O   := build/$(VARIANT)
BIN := $(if $(SANITIZE),$(O)/bin,bin)

PKGS := jansson sqlite3 libmicrohttpd gnutls libcurl zlib libarchive openblas libpcre2-8
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Werror
CPPFLAGS += -D_GNU_SOURCE -Icommon -I. $(PKG_CFLAGS)
CFLAGS   += -std=c11 $(OPT) $(WARN) $(SANFLAGS) -fPIC -MMD -MP -pthread
LDFLAGS  += $(SANFLAGS) -pthread
LDLIBS   += $(PKG_LIBS) -lm -ldl

ifeq ($(MPICC_OK),1)
  CPPFLAGS += -DHF_HAVE_MPI $(shell pkg-config --cflags ompi-c)
  LDLIBS_TRAIN += $(shell pkg-config --libs ompi-c)
endif

ifeq ($(CUDA),1)
  CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
  CPPFLAGS  += -DHF_HAVE_CUDA -I$(CUDA_HOME)/include
  NCCL_OK   := $(shell ls $(CUDA_HOME)/lib64/libnccl.so* $(CUDA_HOME)/include/nccl.h >/dev/null 2>&1 && echo 1)
  ifeq ($(NCCL_OK),1)
    CPPFLAGS += -DHF_HAVE_NCCL
    LDLIBS_TRAIN += -lnccl
  endif
  LDLIBS_TRAIN += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++
  NVCCFLAGS ?= -O2 -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC,-Wall -Icommon -I.
endif

MODULES := common scheduler agent trainer cli
define module_rules
$(1)_SRC  := $$(filter-out $(1)/main.c,$$(wildcard $(1)/*.c $(1)/*/*.c))
$(1)_OBJ  := $$(patsubst %.c,$(O)/%.o,$$($(1)_SRC))
ifeq ($(1)$(CUDA),trainer1)
$(1)_OBJ  += $$(patsubst %.cu,$(O)/%.cu.o,$$(wildcard $(1)/*.cu))
endif
$(O)/lib$(1).a: $$($(1)_OBJ)
	@mkdir -p $$(@D)
	@rm -f $$@
	$$(call say,AR,$$@)
	$(Q)$$(if $$^,ar rcs $$@ $$^,ar rcs $$@)
endef
$(foreach m,$(MODULES),$(eval $(call module_rules,$(m))))

# The scheduler carries schema/NNNN_*.sql inside its binary: schema/embed.sh
# writes them into a generated C table linked into libscheduler.
SCHEMA_SQL := $(sort $(wildcard schema/[0-9]*.sql))
$(O)/gen/schema_sql.c: $(SCHEMA_SQL) schema/embed.sh
	@mkdir -p $(@D)
	schema/embed.sh $(SCHEMA_SQL) > $@
$(O)/gen/schema_sql.o: $(O)/gen/schema_sql.c
	$(call say,CC,$<)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<
$(O)/libscheduler.a: $(O)/gen/schema_sql.o

# ... and the dashboard: web/embed.sh pulls web/'s files into the binary
# (served at / when no --web DIR is given). The vendored libraries come out
# of web/node_modules through web/build.sh.
WEB_VENDOR := web/vendor/uPlot.iife.min.js web/vendor/uPlot.min.css web/vendor/echarts.min.js \
              web/vendor/marked.min.js web/vendor/purify.min.js
WEB_FILES  := $(sort $(shell find web -type f \( -name '*.html' -o -name '*.css' -o -name '*.js' \
                -o -name '*.svg' -o -name '*.png' \) -not -path 'web/node_modules/*' -not -path 'web/vendor/*') \
                $(WEB_VENDOR))
$(WEB_VENDOR) &: web/build.sh web/package-lock.json
	web/build.sh
	@touch $(WEB_VENDOR)
$(O)/gen/web_assets.c: $(WEB_FILES) web/embed.sh
	@mkdir -p $(@D)
	$(call say,GEN,$@)
	$(Q)web/embed.sh web $(WEB_FILES) > $@.tmp && mv $@.tmp $@
$(O)/gen/web_assets.o: $(O)/gen/web_assets.c
	$(call say,CC,$<)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<
$(O)/libscheduler.a: $(O)/gen/web_assets.o

# Each program links its own module's library and common; nothing else, so
# one module's broken build never blocks another's.
LIB_common := $(O)/libcommon.a
$(foreach m,scheduler agent trainer cli,$(eval LIB_$(m) := $(O)/lib$(m).a $(O)/libcommon.a))

PROGRAMS := $(BIN)/hyperfarm-scheduler $(BIN)/hyperfarm-agent $(BIN)/hyperfarm-train $(BIN)/hyperfarm
# Small helper programs used by tests and benchmarks (tests/progs/*.c -> $(BIN)/tests/NAME).
TESTPROG_SRC := $(wildcard tests/progs/*.c)
TESTPROGS    := $(patsubst tests/progs/%.c,$(BIN)/tests/%,$(TESTPROG_SRC))
UNIT_SRC     := $(wildcard tests/unit/test_*.c)
UNIT_BIN     := $(patsubst tests/unit/%.c,$(O)/tests/unit/%,$(UNIT_SRC))
BENCH_SRC    := $(wildcard bench/*.c)
BENCH_BIN    := $(patsubst bench/%.c,$(BIN)/bench/%,$(BENCH_SRC))

.PHONY: all deps test unit system webtest demo bench fuzz clean web
# experiments/c-trial.json ships experiments/examples/ as its code context
# and runs ./c_trial there (experiments/README.md): the example is built
# next to its source, with common/hf_client.h only.
EXAMPLE_BIN := experiments/examples/c_trial
all: $(PROGRAMS) $(TESTPROGS) $(BENCH_BIN) $(EXAMPLE_BIN)

$(EXAMPLE_BIN): experiments/examples/c_trial.c common/hf_client.h
	$(call say,CC,$@)
	$(Q)$(CC) -std=c11 -O2 -Wall -Wextra -Werror -Icommon -o $@ $< -lm

$(BIN)/hyperfarm-scheduler: $(O)/scheduler/main.o $(LIB_scheduler)
$(BIN)/hyperfarm-agent:     $(O)/agent/main.o $(LIB_agent)
$(BIN)/hyperfarm-train:     $(O)/trainer/main.o $(LIB_trainer)
$(BIN)/hyperfarm:           $(O)/cli/main.o $(LIB_cli)
$(PROGRAMS) $(TESTPROGS) $(BENCH_BIN):
	@mkdir -p $(@D)
	$(call say,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(LDLIBS)
# MPI, CUDA and NCCL only for what contains the trainer: the daemons and
# the CLI stay small and start fast.
$(BIN)/hyperfarm-train $(BENCH_BIN): LDLIBS += $(LDLIBS_TRAIN)
$(O)/tests/unit/test_trainer_%: LDLIBS += $(LDLIBS_TRAIN)
# tests/progs/*.c: small programs for tests (fake trials), common only.
$(TESTPROGS): $(BIN)/tests/%: $(O)/tests/progs/%.o $(LIB_common)
# bench/*.c: benchmark drivers; they may use the trainer (collectives).
$(BENCH_BIN): $(BIN)/bench/%: $(O)/bench/%.o $(LIB_trainer)
# bench/search_*.c drive the searchers directly: libscheduler too (libcommon
# again after it, for the symbols it needs).
$(filter $(BIN)/bench/search_%,$(BENCH_BIN)): $(O)/libscheduler.a
$(filter $(BIN)/bench/search_%,$(BENCH_BIN)): LDLIBS := $(O)/libcommon.a $(LDLIBS)
# bench/purge_*.c, repl_*.c and cold_core.c drive the scheduler's core and store directly: libscheduler too.
$(filter $(BIN)/bench/purge_% $(BIN)/bench/repl_% $(BIN)/bench/cold_core,$(BENCH_BIN)): $(O)/libscheduler.a
$(filter $(BIN)/bench/purge_% $(BIN)/bench/repl_% $(BIN)/bench/cold_core,$(BENCH_BIN)): LDLIBS := $(O)/libcommon.a $(LDLIBS)
# bench/search_bbob: the BBOB functions (bench/search/bbob.c, also Optuna's side through ctypes).
$(BIN)/bench/search_bbob: $(O)/bench/search/bbob.o
# bench/ckpt_*.c drive the agent's checkpoint transfers: libagent too.
$(filter $(BIN)/bench/ckpt_%,$(BENCH_BIN)): $(O)/libagent.a
$(filter $(BIN)/bench/ckpt_%,$(BENCH_BIN)): LDLIBS := $(O)/libcommon.a $(LDLIBS)
# bench/sandbox_*.c drive the agent's trial spawn and sandbox: libagent too.
$(filter $(BIN)/bench/sandbox_%,$(BENCH_BIN)): $(O)/libagent.a
$(filter $(BIN)/bench/sandbox_%,$(BENCH_BIN)): LDLIBS := $(O)/libcommon.a $(LDLIBS)

# tests/unit/test_<module>_<what>.c links lib<module> and common.
# test_agent_objects also runs a real scheduler HTTP server in-process.
$(O)/tests/unit/test_agent_objects: $(O)/libscheduler.a
$(O)/tests/unit/test_agent_objects: LDLIBS := $(O)/libcommon.a $(LDLIBS)
unit_module = $(word 2,$(subst _, ,$(notdir $(1))))
.SECONDARY:
.SECONDEXPANSION:
$(O)/tests/unit/%: $(O)/tests/unit/%.o $$(LIB_$$(call unit_module,$$*))
	@mkdir -p $(@D)
	$(call say,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(filter %.a,$^) $(LDLIBS) -lcmocka

$(O)/%.o: %.c
	@mkdir -p $(@D)
	$(call say,CC,$<)
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(O)/%.cu.o: %.cu
	@mkdir -p $(@D)
	$(call say,NVCC,$<)
	$(Q)$(NVCC) $(NVCCFLAGS) $(filter -D%,$(CPPFLAGS)) -MMD -MP -MF $(@:.o=.d) -c -o $@ $<

# Front-end libraries from npm, vendored into web/vendor by web/build.sh.
web:
	@if [ -x web/build.sh ]; then web/build.sh; fi

deps:
	scripts/install-deps
deps-check:
	@scripts/install-deps --check
.PHONY: deps-check

# T=NAME runs only the tests whose name contains NAME (tests/run's filter):
#   make unit T=search_tpe     make system T=fault_agent_kill     make webtest
RUN_TESTS = HF_BIN=$(abspath $(BIN)) HF_UNIT=$(abspath $(O)/tests/unit) HF_VARIANT=$(VARIANT) tests/run
test: all $(UNIT_BIN)
	$(RUN_TESTS) all $(T)

# Everything `make test` runs, built and not run (.ci/run builds the
# sanitizer variant this way while the fresh machine is being made).
test-build: all $(UNIT_BIN)

unit: all $(UNIT_BIN)
	$(RUN_TESTS) unit $(T)

system: all
	$(RUN_TESTS) system $(T)

webtest: all
	HF_WEB_UNDER_SAN=$(if $(SANITIZE),1,) $(RUN_TESTS) web $(T)

# The tree's limits (scripts/lint): no circle of files calling each other,
# no source over 800 lines nor function over 100, no bare pthread_create.
# It reads the objects, so it builds them first; `make test` runs it too.
lint: $(foreach m,$(MODULES),$(O)/lib$(m).a) $(foreach m,scheduler agent trainer cli,$(O)/$(m)/main.o)
	scripts/lint $(O)
.PHONY: lint

fuzz-replay: build/rel/gen/schema_sql.c build/rel/gen/web_assets.c
	$(RUN_TESTS) fuzz $(T)
.PHONY: fuzz-replay help

demo: all
	scripts/demo

bench: all
	HF_BIN=$(abspath $(BIN)) bench/run

# One rank count, one size: a line per implementation (tcp, mpi, gloo) with busbw.
NP ?= 4
SIZE_MIB ?= 64
bench-allreduce: $(BIN)/bench/allreduce
	HF_ROOT=$(CURDIR) $(BIN)/bench/allreduce --np $(NP) --sizes $(SIZE_MIB)M --rounds 3
.PHONY: bench-allreduce

FUZZ_SECONDS ?= 30
fuzz: build/rel/gen/schema_sql.c build/rel/gen/web_assets.c
	FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run

clean:
	rm -rf build bin experiments/examples/c_trial

help:
	@echo 'hyperfarm make targets (install what is missing first, as root, except help/clean):'
	@echo '  make                 build every program into bin/ (CUDA backend when nvcc exists; CUDA=0 to skip)'
	@echo '  make demo            start a scheduler + local agent, run a Fashion-MNIST sweep, print the dashboard URL'
	@echo '  make test            unit + system + fuzz-corpus + browser tests; last line "N passed, N failed"'
	@echo '  make unit            unit tests only (cmocka)'
	@echo '  make system          system tests only (real daemons on loopback)'
	@echo '  make webtest         browser tests only (headless Chromium)'
	@echo '  make lint            the tree'"'"'s limits: no circular calls between files, sizes, named threads (scripts/lint)'
	@echo '  make fuzz-replay     every libFuzzer target over its seed corpus'
	@echo '  make fuzz            each libFuzzer target for FUZZ_SECONDS (default 30)'
	@echo '  make bench           every benchmark, our figure beside the peer'"'"'s and the ratio'
	@echo '  make deps            install the Debian and npm packages (scripts/install-deps)'
	@echo '  make clean           remove build/ and bin/'
	@echo 'One test: T=NAME keeps the tests whose name contains NAME, e.g.'
	@echo '  make unit T=test_scheduler_search_tpe    make system T=fault_agent_kill    make test T=openapi'
	@echo 'System tests run 2 at a time, each in its own network namespace: HF_TEST_JOBS=N for N (1: one at a time)'
	@echo 'Variants: SANITIZE=address,undefined (ASan+UBSan, build/san/), V=1 (full command lines)'

-include $(shell find build -name '*.d' 2>/dev/null)

endif  # HF_MAKE_STAGE
