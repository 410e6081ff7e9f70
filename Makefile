# psd and libpsclient. `make run` and `make test` install what is missing
# from Debian's packages (apt-get, through sudo when not root) and say so.

PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
DESTDIR ?=
BUILD   ?= build
CC      ?= cc

# The version is written once, in client/psclient.h (PS_VERSION_*).
VERSION   := $(shell sed -n 's/^\#define PS_VERSION_[A-Z]* \([0-9]*\)$$/\1/p' \
               client/psclient.h | paste -sd.)
SOVERSION := 0

# msgpack-c 4.x ships `msgpack`; 6.x renamed it `msgpack-c`.
MSGPACK_PC = $(shell pkg-config --exists msgpack-c 2>/dev/null && echo msgpack-c || echo msgpack)

OPT   ?= -O2 -g
# sqrtf without errno lets the updater loops vectorise; GCC 12's -O2 only
# vectorises loops that need no scalar tail, which a row of any dim does,
# so allow that cost model (element-wise IEEE arithmetic: results are the
# same bit for bit).
MATH  := -fno-math-errno -fvect-cost-model=dynamic
CSTD  := -std=c11 -D_POSIX_C_SOURCE=200809L
WARN  := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
         -Wpointer-arith -Wwrite-strings -Wformat=2 -Wundef -Wcast-align=strict
CFLAGS_ALL = $(CSTD) $(WARN) $(OPT) $(MATH) $(SAN) -Iclient $(CPPFLAGS) $(CFLAGS) \
             $(shell pkg-config --cflags libuv $(MSGPACK_PC) inih libisal libsodium \
                 2>/dev/null)
LDFLAGS_ALL = $(SAN) $(LDFLAGS)

LIBS_UV  = $(shell pkg-config --libs libuv)
# proto/ needs msgpack-c, ISA-L (CRC32C of every frame, ~40 GB/s) and
# libsodium (the handshake's HMAC-SHA-256, nonces, constant-time compare).
LIBS_MP  = $(shell pkg-config --libs $(MSGPACK_PC) libisal libsodium)
LIBS_INI = $(shell pkg-config --libs inih)
LIBS_ISAL = $(shell pkg-config --libs libisal)
LIBS_CM  = $(shell pkg-config --libs cmocka)

PROTO_SRC  := proto/status.c proto/frame.c proto/msg.c proto/hist.c proto/addr.c proto/auth.c \
              proto/map.c
DAEMON_SRC := daemon/inifile.c daemon/config.c daemon/log.c daemon/updater.c daemon/table.c \
              daemon/sync.c daemon/dedup.c daemon/secret.c daemon/node.c daemon/request.c \
              daemon/journal.c daemon/snapshot.c daemon/durable.c daemon/auth.c \
              daemon/preflight.c daemon/conn.c daemon/server.c daemon/notify.c \
              daemon/admin.c daemon/metrics.c daemon/export.c \
              daemon/reshard.c daemon/npy.c daemon/import.c
CLIENT_SRC := client/slice.c client/scan.c client/stats.c client/customer.c client/io.c client/client.c \
              client/nodes.c client/bufpool.c

PROTO_OBJ  := $(PROTO_SRC:%.c=$(BUILD)/%.o)
DAEMON_OBJ := $(DAEMON_SRC:%.c=$(BUILD)/%.o)
PIC_OBJ    := $(CLIENT_SRC:%.c=$(BUILD)/pic/%.o) $(PROTO_SRC:%.c=$(BUILD)/pic/%.o)

PSD      := $(BUILD)/psd
PSCTL    := $(BUILD)/psctl
SOLIB    := $(BUILD)/libpsclient.so.$(VERSION)
ALIB     := $(BUILD)/libpsclient.a
PCFILE   := $(BUILD)/psclient.pc
EXAMPLES := $(BUILD)/fashion_softmax $(BUILD)/fashion_mlp $(BUILD)/reuters_lr
UNIT_TESTS := $(BUILD)/test_frame $(BUILD)/test_config $(BUILD)/test_updater \
              $(BUILD)/test_table $(BUILD)/test_sync $(BUILD)/test_dedup \
              $(BUILD)/test_snapshot $(BUILD)/test_log \
              $(BUILD)/test_slice $(BUILD)/test_arff $(BUILD)/test_npy
E2E_TESTS  := $(BUILD)/test_e2e $(BUILD)/test_auth $(BUILD)/test_modes $(BUILD)/test_proxy \
              $(BUILD)/test_faults $(BUILD)/test_stats $(BUILD)/test_durable \
              $(BUILD)/test_ops $(BUILD)/test_limits $(BUILD)/test_conn \
              $(BUILD)/test_numerics $(BUILD)/test_ts
TEST_BINS  := $(UNIT_TESTS) $(E2E_TESTS) $(BUILD)/mh_client

DEPS_STAMP := $(BUILD)/.deps-ok

.PHONY: all test run run-modes run-faults run-torch soak bench bench-durability bench-zerocopy sanitize tsan \
        install uninstall clean deps help
all: $(PSD) $(PSCTL) $(SOLIB) $(ALIB) $(PCFILE) $(EXAMPLES) $(BUILD)/faultproxy

# ---- dependencies ---------------------------------------------------------
# pkg-config name -> Debian package. Checked once per build tree. cmocka
# only for the tests' objects ($(TEST_DEPS_STAMP)): a packager building
# psd and libpsclient needs no test library (an install trial). A missing
# package is installed with $(APT_INSTALL); APT_INSTALL=false makes it an
# error instead (a package build, which must not run apt-get).
DEB_PKGS := libuv:libuv1-dev msgpack:libmsgpack-dev inih:libinih-dev \
            libisal:libisal-dev libsodium:libsodium-dev
TEST_DEB_PKGS := cmocka:libcmocka-dev

deps: $(DEPS_STAMP)
# Checked again when the Makefile changes (a new dependency, such as
# libsodium, reaches build trees made before it).
$(DEPS_STAMP): Makefile
	@mkdir -p $(BUILD)
	@missing=""; \
	command -v pkg-config >/dev/null 2>&1 || missing="pkg-config"; \
	for p in $(DEB_PKGS); do \
	  pc=$${p%%:*}; deb=$${p#*:}; \
	  command -v pkg-config >/dev/null 2>&1 && pkg-config --exists $$pc || missing="$$missing $$deb"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing missing Debian packages:$$missing"; \
	  $(APT_INSTALL) $$missing || { echo "make: could not install:$$missing" >&2; exit 1; }; \
	fi
	@touch $@

TEST_DEPS_STAMP := $(BUILD)/.testdeps-ok
deps: $(TEST_DEPS_STAMP)
$(TEST_DEPS_STAMP): Makefile | $(DEPS_STAMP)
	@missing=""; \
	for p in $(TEST_DEB_PKGS); do \
	  pc=$${p%%:*}; deb=$${p#*:}; \
	  pkg-config --exists $$pc || missing="$$missing $$deb"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing missing Debian packages for the tests:$$missing"; \
	  $(APT_INSTALL) $$missing || { echo "make: could not install:$$missing" >&2; exit 1; }; \
	fi
	@touch $@

# The Python binding's tests run with Debian's /usr/bin/python3 and its
# numpy and pytest: Python module -> Debian package, checked once per build
# tree and only for `make test`; after the step above, so that two apt-get
# never run at once under make -j.
PYTHON      := /usr/bin/python3
PY_DEB_PKGS := numpy:python3-numpy pytest:python3-pytest
PYDEPS_STAMP := $(BUILD)/.pydeps-ok

deps: $(PYDEPS_STAMP)
$(PYDEPS_STAMP): | $(DEPS_STAMP) $(TEST_DEPS_STAMP)
	@mkdir -p $(BUILD)
	@missing=""; \
	for p in $(PY_DEB_PKGS); do \
	  mod=$${p%%:*}; deb=$${p#*:}; \
	  $(PYTHON) -c "import $$mod" >/dev/null 2>&1 || missing="$$missing $$deb"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing missing Debian packages for $(PYTHON):$$missing"; \
	  $(APT_INSTALL) $$missing || { echo "make: could not install:$$missing" >&2; exit 1; }; \
	fi
	@touch $@

SUDO = $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_INSTALL = $(SUDO) apt-get update -qq && \
              $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq

FASHION_DIR := /usr/share/datasets/fashion-mnist
$(FASHION_DIR)/train-images-idx3-ubyte.gz:
	@echo "make: installing missing Debian package: dataset-fashion-mnist"
	@$(APT_INSTALL) dataset-fashion-mnist

# ---- objects ---------------------------------------------------------------
$(BUILD)/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

# The tests' objects that include cmocka's header (not faultproxy's,
# which `all` builds) wait for it too.
CMOCKA_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/test_*.c) tests/raw.c)
$(CMOCKA_OBJ): | $(TEST_DEPS_STAMP)

# libpsclient objects: position independent, only ps_* visible.
$(BUILD)/pic/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -fPIC -fvisibility=hidden -MMD -MP -c $< -o $@

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ---- products --------------------------------------------------------------
$(PSD): $(BUILD)/daemon/main.o $(DAEMON_OBJ) $(PROTO_OBJ)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_UV) $(LIBS_MP) $(LIBS_INI) -lm

# psctl speaks the protocol itself and reads the cluster's ini.
$(PSCTL): $(BUILD)/daemon/psctl.o $(BUILD)/daemon/config.o \
          $(BUILD)/daemon/inifile.o $(BUILD)/client/nodes.o $(PROTO_OBJ)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_MP) $(LIBS_INI) -lm

$(SOLIB): $(PIC_OBJ)
	$(CC) -shared -Wl,-soname,libpsclient.so.$(SOVERSION) -Wl,-z,defs $(LDFLAGS_ALL) \
	    -o $@ $^ $(LIBS_UV) $(LIBS_MP) $(LIBS_INI) -lpthread
	ln -sf libpsclient.so.$(VERSION) $(BUILD)/libpsclient.so.$(SOVERSION)
	ln -sf libpsclient.so.$(VERSION) $(BUILD)/libpsclient.so

$(ALIB): $(PIC_OBJ)
	rm -f $@; ar rcs $@ $^

# psclient.h needs none of the libraries libpsclient links: their flags
# for a static link are written out (Libs.private) rather than named as
# Requires.private, which pkg-config resolves for every query, so that
# `pkg-config --cflags --libs psclient` also works where their -dev
# packages are not installed.
PC_DEPS = libuv $(MSGPACK_PC) inih libisal libsodium
PC_LIBS = $(shell pkg-config --libs --static $(PC_DEPS))
PC_SED = -e 's\#@PREFIX@\#$(PREFIX)\#' \
         -e 's\#@LIBDIR@\#$(patsubst $(PREFIX)%,$${prefix}%,$(LIBDIR))\#' \
         -e 's\#@VERSION@\#$(VERSION)\#' \
         -e 's\#@LIBS_PRIVATE@\#$(PC_LIBS)\#'

$(PCFILE): client/psclient.pc.in Makefile
	@mkdir -p $(@D)
	sed $(PC_SED) $< > $@

# Examples and tests link the shared library from the build tree.
CLIENT_LINK = -L$(BUILD) -Wl,-rpath,'$$ORIGIN' -lpsclient

$(BUILD)/fashion_softmax: $(BUILD)/examples/fashion_softmax.o \
                          $(BUILD)/examples/common.o $(BUILD)/examples/idx.o \
                          $(BUILD)/examples/softmax.o $(SOLIB)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) -lm

$(BUILD)/fashion_mlp: $(BUILD)/examples/fashion_mlp.o \
                      $(BUILD)/examples/common.o $(BUILD)/examples/idx.o \
                      $(BUILD)/examples/mlp.o $(BUILD)/examples/softmax.o $(SOLIB)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) -lm

# ---- tests -----------------------------------------------------------------
$(BUILD)/test_frame: $(BUILD)/tests/test_frame.o $(PROTO_OBJ)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_MP) $(LIBS_CM)
# Unit tests link only the objects they test (and what those call), so
# the linker keeps the layering honest.
D := $(BUILD)/daemon
$(BUILD)/test_config: $(BUILD)/tests/test_config.o $(D)/config.o $(D)/inifile.o \
                      $(D)/preflight.o $(D)/updater.o $(BUILD)/proto/addr.o \
                      $(BUILD)/proto/auth.o
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_INI) $(LIBS_MP) $(LIBS_CM) -lm
$(BUILD)/test_updater: $(BUILD)/tests/test_updater.o $(D)/updater.o
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_CM) -lm
# The allocations of table.c (and the test's own) go through the test's
# wrappers, which fail one on demand: out of memory mid-apply.
$(BUILD)/test_table: $(BUILD)/tests/test_table.o $(D)/table.o $(D)/updater.o \
                      $(BUILD)/proto/status.o
	$(CC) $(LDFLAGS_ALL) -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc \
	    -o $@ $^ $(LIBS_CM) -lm
$(BUILD)/test_sync: $(BUILD)/tests/test_sync.o $(D)/sync.o $(D)/log.o
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_CM)
$(BUILD)/test_dedup: $(BUILD)/tests/test_dedup.o $(D)/dedup.o $(D)/secret.o
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_CM)
$(BUILD)/test_log: $(BUILD)/tests/test_log.o $(D)/log.o
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_CM)
$(BUILD)/test_npy: $(BUILD)/tests/test_npy.o $(D)/npy.o
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_ISAL) $(LIBS_CM)
$(BUILD)/test_snapshot: $(BUILD)/tests/test_snapshot.o $(D)/snapshot.o $(D)/journal.o \
                        $(D)/node.o $(D)/table.o $(D)/updater.o $(D)/sync.o \
                        $(D)/dedup.o $(D)/secret.o $(D)/config.o $(D)/inifile.o $(D)/log.o \
                        $(PROTO_OBJ)
	$(CC) $(LDFLAGS_ALL) -Wl,--wrap=read,--wrap=fread -o $@ $^ $(LIBS_MP) $(LIBS_INI) \
	    $(LIBS_CM) -lm
$(BUILD)/test_slice: $(BUILD)/tests/test_slice.o $(BUILD)/client/slice.o $(BUILD)/client/scan.o $(BUILD)/client/stats.o \
                     $(BUILD)/client/customer.o $(BUILD)/client/bufpool.o $(PROTO_OBJ)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_UV) $(LIBS_MP) $(LIBS_CM) -lpthread
$(BUILD)/test_e2e: $(BUILD)/tests/test_e2e.o $(BUILD)/tests/cluster.o $(BUILD)/tests/raw.o $(PROTO_OBJ) $(SOLIB) $(PSD)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) $(LIBS_MP) $(LIBS_CM) -lpthread

$(BUILD)/test_limits: $(BUILD)/tests/test_limits.o $(BUILD)/tests/cluster.o $(BUILD)/tests/raw.o $(PROTO_OBJ) \
                      $(SOLIB) $(PSD)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) $(LIBS_MP) $(LIBS_CM) -lpthread -lm

# The connection layer's life cycle against raw sockets.
$(BUILD)/test_conn: $(BUILD)/tests/test_conn.o $(BUILD)/tests/cluster.o $(BUILD)/tests/raw.o \
                    $(PROTO_OBJ) $(PSD) $(BUILD)/accept_oom.so
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(LIBS_MP) $(LIBS_CM)

# test_conn and test_ops preload this shim into psd to make the allocation of a
# connection fail (tests/accept_oom.c). No sanitizers: it goes only into
# a plain psd (test_conn skips those tests when psd has ASan).
$(BUILD)/accept_oom.so: tests/accept_oom.c | $(DEPS_STAMP)
	$(CC) $(CSTD) $(WARN) $(OPT) -fPIC -shared -o $@ $< -ldl

# The clients of the multi-host test (tests/test_multihost.sh), one
# process per role inside a network namespace.
$(BUILD)/mh_client: $(BUILD)/tests/mh_client.o $(BUILD)/tests/oracle.o $(SOLIB)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) -lpthread

# Token authentication against real nodes, raw sockets and impostors.
$(BUILD)/test_auth: $(BUILD)/tests/test_auth.o $(BUILD)/tests/cluster.o $(BUILD)/tests/raw.o $(BUILD)/daemon/auth.o $(BUILD)/daemon/log.o $(PROTO_OBJ) $(SOLIB) $(PSD)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) $(LIBS_MP) $(LIBS_CM) -lpthread

$(BUILD)/test_modes: $(BUILD)/tests/test_modes.o $(BUILD)/tests/cluster.o $(SOLIB) $(PSD)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) $(LIBS_CM) -lpthread
$(BUILD)/test_numerics: $(BUILD)/tests/test_numerics.o $(BUILD)/tests/cluster.o $(SOLIB) $(PSD)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) $(LIBS_CM) -lm -lpthread
# Linked with the static library: the test reaches into struct ps_client.
$(BUILD)/test_ts: $(BUILD)/tests/test_ts.o $(BUILD)/tests/cluster.o $(ALIB) $(PSD)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(ALIB) $(LIBS_UV) $(LIBS_MP) \
	    $(LIBS_INI) $(LIBS_CM) -lm -lpthread

# The fault-injection proxy (tests/faultproxy.h): a command for scripts
# and a test of its own, with no psd or client code in either.
$(BUILD)/faultproxy: $(BUILD)/tests/faultproxy_main.o $(BUILD)/tests/faultproxy.o
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_UV) -lpthread
$(BUILD)/test_proxy: $(BUILD)/tests/test_proxy.o $(BUILD)/tests/faultproxy.o
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_UV) $(LIBS_CM) -lpthread
$(BUILD)/test_stats: $(BUILD)/tests/test_stats.o $(BUILD)/client/stats.o $(BUILD)/proto/hist.o \
                     $(BUILD)/tests/cluster.o $(SOLIB) $(PSD)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) $(LIBS_CM) -lm
$(BUILD)/test_ops: $(BUILD)/tests/test_ops.o $(BUILD)/tests/cluster.o \
                   $(BUILD)/tests/faultproxy.o $(BUILD)/tests/raw.o \
                   $(PROTO_OBJ) $(SOLIB) $(PSD) $(PSCTL) $(BUILD)/accept_oom.so
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) $(LIBS_UV) \
	    $(LIBS_MP) $(LIBS_CM) -lpthread -lm
$(BUILD)/test_faults: $(BUILD)/tests/test_faults.o $(BUILD)/tests/faultproxy.o \
                      $(BUILD)/tests/oracle.o $(BUILD)/tests/cluster.o \
                      $(BUILD)/tests/raw.o $(PROTO_OBJ) $(SOLIB) $(PSD)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) $(LIBS_UV) \
	    $(LIBS_MP) $(LIBS_CM) -lpthread

$(BUILD)/test_durable: $(BUILD)/tests/test_durable.o $(BUILD)/tests/oracle.o \
                       $(BUILD)/tests/cluster.o $(SOLIB) $(PSD)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) $(LIBS_CM) -lpthread

test: all $(TEST_BINS) $(PYDEPS_STAMP)
	@SAN='$(SAN)' sh tests/run.sh $(BUILD)

# Benchmarks against real psd processes, with baselines measured in the
# same run and ps-lite measured on the same cells when the optional harness
# folder is there (PSLITE_HARNESS; see tests/bench/README.md). Not part of
# `make test`. BENCH_QUICK=1: baselines and the side-by-side table only.
$(BUILD)/psbench: $(BUILD)/tests/bench/psbench.o $(BUILD)/tests/cluster.o \
                  $(SOLIB) $(PSD)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) -lpthread -lm

$(BUILD)/durbench: $(BUILD)/tests/bench/durbench.o $(BUILD)/tests/cluster.o \
                   $(SOLIB) $(PSD) $(PSCTL)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) -lpthread -lm

# MSG_ZEROCOPY against plain sends on a raw loopback stream (why psd does
# not use it: tests/bench/README.md section 5c; about 20 s).
$(BUILD)/zcbench: $(BUILD)/tests/bench/zcbench.o
	$(CC) $(LDFLAGS_ALL) -o $@ $^

# BENCH_QUICK=1 stops after the side-by-side table, as it says.
bench: all $(BUILD)/psbench $(BUILD)/durbench $(BUILD)/zcbench
	@sh tests/bench/run_bench.sh $(BUILD)
	@[ "$${BENCH_QUICK:-0}" = 1 ] || \
	    $(BUILD)/durbench --psd $(BUILD)/psd --psctl $(BUILD)/psctl
	@[ "$${BENCH_QUICK:-0}" = 1 ] || $(BUILD)/zcbench

bench-zerocopy: $(BUILD)/zcbench
	@$(BUILD)/zcbench

# Durability's costs alone (about 2 minutes).
bench-durability: all $(BUILD)/durbench
	@$(BUILD)/durbench --psd $(BUILD)/psd --psctl $(BUILD)/psctl

# ASan + UBSan build of everything, in its own tree, running the whole suite.
sanitize:
	$(MAKE) BUILD=build-san OPT="-O1 -g -fno-omit-frame-pointer" \
	    SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined" test

# ThreadSanitizer build of everything, in its own tree, running the whole
# suite: libpsclient's I/O thread and its callers' threads share the
# Customer, the connections' queues and the buffer pool. Not part of
# .ci/run: about 5 minutes more on a 2-core VM, where .ci/run takes about
# 12 of its 20. Built with clang (from the packages
# the fuzz targets install): GCC 12's TSan cannot start threads in a child
# forked from a process with threads ("dup thread"), which the tests' forked
# workers do; clang 14's can, with die_after_fork=0. The programs carry
# the runtime and libpsclient.so leaves it to them (-z undefs); python3
# does not start with clang's runtime preloaded, so the Python tests skip.
# -Wcast-align=strict and -fvect-cost-model are GCC's. tests/tsan.supp
# says what it suppresses and why.
TSAN_CC ?= clang
tsan:
	TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp die_after_fork=0 $(TSAN_OPTIONS)" \
	CC=$(TSAN_CC) $(MAKE) CC=$(TSAN_CC) BUILD=build-tsan \
	    OPT="-O1 -g -fno-omit-frame-pointer" MATH=-fno-math-errno \
	    WARN="$(subst -Wcast-align=strict,-Wcast-align,$(WARN))" \
	    SAN=-fsanitize=thread LDFLAGS=-Wl,-z,undefs test

# RUN_INI: another cluster (its own ports and data_dir) for the demo.
RUN_INI ?= conf/cluster-2.ini
run: all $(FASHION_DIR)/train-images-idx3-ubyte.gz
	@sh examples/run_fashion.sh $(BUILD) $(RUN_INI)

# The demo across hosts: three network namespaces (needs root), psd nodes
# on two of them with a token, 4 workers on the third; not part of CI.
.PHONY: run-cluster
run-cluster: all $(FASHION_DIR)/train-images-idx3-ubyte.gz
	@sh examples/run_cluster.sh $(BUILD)

# The training modes demonstration: async, bsp and ssp with 4 workers, bsp
# against a single process, and stragglers (about 2 minutes).
# MODES_INI: another cluster (its own ports and data_dir), as RUN_INI.
MODES_INI ?= conf/fashion-mlp.ini
run-modes: all $(FASHION_DIR)/train-images-idx3-ubyte.gz
	@sh examples/run_modes.sh $(BUILD) $(MODES_INI)

# Rounds of random faults under ASan + UBSan, each checked with the counter
# oracle (tests/soak.c). SOAK_ROUNDS=N, SOAK_SEED=S. Not part of make test.
SOAK_ROUNDS ?= 20
$(BUILD)/soak: $(BUILD)/tests/soak.o $(BUILD)/tests/faultproxy.o \
               $(BUILD)/tests/oracle.o $(BUILD)/tests/cluster.o $(SOLIB) $(PSD)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) $(LIBS_UV) \
	    -lpthread
soak:
	$(MAKE) BUILD=build-san OPT="-O1 -g -fno-omit-frame-pointer" \
	    SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined" \
	    build-san/soak build-san/psd
	PSD_BIN=$$(pwd)/build-san/psd build-san/soak --rounds $(SOAK_ROUNDS) \
	    $(if $(SOAK_SEED),--seed $(SOAK_SEED))

# The demo under faults: 20% frame drop both ways through fault proxies and
# a node killed and restarted, against a clean run (about 3 minutes: every
# dropped frame costs its request a 50 ms attempt and a reconnection, about
# 1,100 per worker and epoch; the clean run takes 3 s).
run-faults: all $(FASHION_DIR)/train-images-idx3-ubyte.gz
	@sh examples/run_faults.sh $(BUILD)

# ---- PyTorch on Fashion-MNIST (make run-torch) -----------------------------
# Not part of `make test` or CI: Debian's python3-torch is large. A CNN in
# PyTorch trained by 4 worker processes whose parameters live in psd
# (conf/torch-fashion.ini), async and bsp, each on fresh nodes on free
# ports, then by torch alone in one process (examples/torch_fashion.py).
# TORCH_ARGS passes options, e.g. TORCH_ARGS="--epochs 5".
PY_TORCH_PKGS  := numpy:python3-numpy torch:python3-torch
TORCH_STAMP    := $(BUILD)/.torch-ok
TORCH_ARGS     ?=

$(TORCH_STAMP): | $(DEPS_STAMP)
	@mkdir -p $(BUILD)
	@missing=""; \
	for p in $(PY_TORCH_PKGS); do \
	  mod=$${p%%:*}; deb=$${p#*:}; \
	  $(PYTHON) -c "import $$mod" >/dev/null 2>&1 || missing="$$missing $$deb"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "make: installing missing Debian packages for $(PYTHON):$$missing"; \
	  $(APT_INSTALL) $$missing || { echo "make: could not install:$$missing" >&2; exit 1; }; \
	fi
	@touch $@

run-torch: all $(TORCH_STAMP) $(FASHION_DIR)/train-images-idx3-ubyte.gz
	@PYTHONDONTWRITEBYTECODE=1 $(PYTHON) examples/torch_fashion.py \
	    --build $(BUILD) --data $(FASHION_DIR) $(TORCH_ARGS)

# ---- sparse logistic regression on Reuters (make run-sparse) ---------------
# Not part of `make test` or CI: it downloads data. examples/fetch_reuters.sh
# fetches Debian's weka package with `apt-get download` (no root; nothing is
# installed), unpacks only the two ARFF files into REUTERS_DIR and deletes
# the package; only if the download fails does it run `apt-get update`
# (through sudo when not root) and try again. The data may be used for
# research only, so it lives in the build tree, never in the repository.
REUTERS_DIR ?= $(BUILD)/reuters
SPARSE_EPOCHS ?= 10
REUTERS_ARFF := $(REUTERS_DIR)/ReutersGrain-train.arff \
                $(REUTERS_DIR)/ReutersGrain-test.arff

$(REUTERS_ARFF) &:
	@echo "make: fetching Reuters-21578 Grain from Debian's weka package" \
	    "into $(REUTERS_DIR) (downloaded, not installed)"
	@sh examples/fetch_reuters.sh $(REUTERS_DIR)

$(BUILD)/reuters_lr: $(BUILD)/examples/reuters_lr.o $(BUILD)/examples/arff.o \
                     $(BUILD)/examples/common.o $(BUILD)/examples/idx.o $(SOLIB)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(CLIENT_LINK) -lm

$(BUILD)/test_arff: $(BUILD)/tests/test_arff.o $(BUILD)/examples/arff.o
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_CM)

# Sparse logistic regression with 4 workers on a 2-node cluster
# (conf/reuters.ini, or SPARSE_INI: its own ports and data_dir);
# SPARSE_EPOCHS=N sets the epochs.
SPARSE_INI ?= conf/reuters.ini
.PHONY: run-sparse
run-sparse: all $(REUTERS_ARFF)
	@sh examples/run_sparse.sh $(BUILD) $(SPARSE_INI) $(REUTERS_DIR) \
	    $(SPARSE_EPOCHS)

# ---- fuzzing (tests/fuzz/README.md) ----------------------------------------
# Six libFuzzer targets: the frame reader, the message codec, the config
# reader, the daemon's request handling in process, and the files psd
# loads at start (snapshot, journal). `make test` replays
# their seed corpus and regression inputs through plain builds of the same
# files (tests/fuzz/replay.c gives them a main(), so no clang is needed)
# and checks that the committed seeds are what make_seeds writes.
FZ := tests/fuzz
FUZZ_TARGETS := fuzz_frame fuzz_msg fuzz_config fuzz_request fuzz_snapshot \
                fuzz_journal
# Each target links only what it exercises.
FUZZ_OBJ_frame   := $(FZ)/fuzz_frame.o $(FZ)/decode.o $(PROTO_SRC:.c=.o)
FUZZ_OBJ_msg     := $(FZ)/fuzz_msg.o $(FZ)/decode.o $(PROTO_SRC:.c=.o)
FUZZ_OBJ_config  := $(FZ)/fuzz_config.o daemon/config.o daemon/inifile.o \
                    proto/addr.o proto/auth.o
# A node with its tables, as request.c serves it.
FUZZ_NODE_OBJ    := daemon/request.o daemon/node.o daemon/config.o \
                    daemon/inifile.o daemon/table.o daemon/updater.o \
                    daemon/sync.o daemon/dedup.o daemon/secret.o daemon/journal.o \
                    daemon/log.o $(PROTO_SRC:.c=.o)
FUZZ_OBJ_request := $(FZ)/fuzz_request.o $(FZ)/decode.o $(FZ)/disk.o \
                    $(FUZZ_NODE_OBJ)
FUZZ_OBJ_snapshot := $(FZ)/fuzz_snapshot.o $(FZ)/disk.o daemon/snapshot.o \
                     $(FUZZ_NODE_OBJ)
FUZZ_OBJ_journal := $(FZ)/fuzz_journal.o $(FZ)/disk.o daemon/snapshot.o \
                    $(FUZZ_NODE_OBJ)
FUZZ_OBJ_seeds   := $(FZ)/make_seeds.o $(FZ)/disk.o daemon/snapshot.o \
                    $(FUZZ_NODE_OBJ)
FUZZ_REPLAY := $(FUZZ_TARGETS:%=$(BUILD)/%) $(BUILD)/make_seeds

$(BUILD)/fuzz_frame: $(addprefix $(BUILD)/,$(FUZZ_OBJ_frame) $(FZ)/replay.o)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_MP)
$(BUILD)/fuzz_msg: $(addprefix $(BUILD)/,$(FUZZ_OBJ_msg) $(FZ)/replay.o)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_MP)
$(BUILD)/fuzz_config: $(addprefix $(BUILD)/,$(FUZZ_OBJ_config) $(FZ)/replay.o)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_INI) $(LIBS_MP)
$(BUILD)/fuzz_request: $(addprefix $(BUILD)/,$(FUZZ_OBJ_request) $(FZ)/replay.o)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_MP) $(LIBS_INI) -lm
$(BUILD)/fuzz_snapshot: $(addprefix $(BUILD)/,$(FUZZ_OBJ_snapshot) $(FZ)/replay.o)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_MP) $(LIBS_INI) -lm
$(BUILD)/fuzz_journal: $(addprefix $(BUILD)/,$(FUZZ_OBJ_journal) $(FZ)/replay.o)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_MP) $(LIBS_INI) -lm
# make_seeds writes the snapshot and journal seeds with the daemon's own
# writers, so it links a node.
$(BUILD)/make_seeds: $(addprefix $(BUILD)/,$(FUZZ_OBJ_seeds))
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_MP) $(LIBS_INI) -lm
test: $(FUZZ_REPLAY)

# Rewrites the committed seed corpus (after a protocol change).
fuzz-seeds: $(BUILD)/make_seeds
	rm -rf $(FZ)/corpus
	$(BUILD)/make_seeds $(FZ)/corpus

# The libFuzzer builds: clang, ASan + UBSan, coverage for libFuzzer, in a
# tree of their own. `make fuzz FUZZ_SECONDS=N` runs each target N seconds
# (default 60) from a copy of its corpus and prints what each found;
# `make fuzz-ci` is a short run: 15 s per target, 10 s for each of the
# two file targets (80 s); .ci/run gives each target 45 s (make fuzz).
FUZZ_BUILD   ?= build-fuzz
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS   = $(CSTD) -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
                -Wmissing-prototypes -O1 -g -fno-omit-frame-pointer \
                -fno-math-errno $(FUZZ_SAN) -fsanitize=fuzzer-no-link \
                $(shell pkg-config --cflags $(MSGPACK_PC) inih libisal \
                    libsodium 2>/dev/null)
FUZZ_LINK     = $(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^
FUZZERS      := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/%)
FUZZ_CI_TARGETS := fuzz_frame fuzz_msg fuzz_config fuzz_request \
                   fuzz_snapshot:10 fuzz_journal:10
FUZZ_DEPS_STAMP := $(FUZZ_BUILD)/.deps-ok
# make tsan's clang and its runtime come from the same packages.
tsan: $(FUZZ_DEPS_STAMP)

# libFuzzer comes with clang; Debian keeps its runtime in libclang-rt-14-dev.
# Checked by linking an empty fuzzer, once per fuzz tree.
$(FUZZ_DEPS_STAMP): | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n);' \
	    'int LLVMFuzzerTestOneInput(const char *d, unsigned long n)' \
	    '{ (void)d; (void)n; return 0; }' > $(@D)/probe.c
	@$(FUZZ_CC) -fsanitize=fuzzer,address,undefined $(@D)/probe.c \
	    -o $(@D)/probe >/dev/null 2>&1 || { \
	  echo "make: installing missing Debian packages for libFuzzer:" \
	      "clang libclang-rt-14-dev"; \
	  $(APT_INSTALL) clang libclang-rt-14-dev || { echo "make: could" \
	      "not install: clang libclang-rt-14-dev" >&2; exit 1; }; }
	@rm -f $(@D)/probe.c $(@D)/probe
	@touch $@

$(FUZZ_BUILD)/%.o: %.c | $(FUZZ_DEPS_STAMP)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

-include $(shell find $(FUZZ_BUILD) -name '*.d' 2>/dev/null)

$(FUZZ_BUILD)/fuzz_frame: $(addprefix $(FUZZ_BUILD)/,$(FUZZ_OBJ_frame))
	$(FUZZ_LINK) $(LIBS_MP)
$(FUZZ_BUILD)/fuzz_msg: $(addprefix $(FUZZ_BUILD)/,$(FUZZ_OBJ_msg))
	$(FUZZ_LINK) $(LIBS_MP)
$(FUZZ_BUILD)/fuzz_config: $(addprefix $(FUZZ_BUILD)/,$(FUZZ_OBJ_config))
	$(FUZZ_LINK) $(LIBS_INI) $(LIBS_MP)
$(FUZZ_BUILD)/fuzz_request: $(addprefix $(FUZZ_BUILD)/,$(FUZZ_OBJ_request))
	$(FUZZ_LINK) $(LIBS_MP) $(LIBS_INI) -lm
$(FUZZ_BUILD)/fuzz_snapshot: $(addprefix $(FUZZ_BUILD)/,$(FUZZ_OBJ_snapshot))
	$(FUZZ_LINK) $(LIBS_MP) $(LIBS_INI) -lm
$(FUZZ_BUILD)/fuzz_journal: $(addprefix $(FUZZ_BUILD)/,$(FUZZ_OBJ_journal))
	$(FUZZ_LINK) $(LIBS_MP) $(LIBS_INI) -lm

.PHONY: fuzz fuzz-ci fuzz-build fuzz-seeds
fuzz-build: $(FUZZERS)
fuzz: $(FUZZERS)
	@sh $(FZ)/run_fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)
fuzz-ci: $(FUZZERS)
	@sh $(FZ)/run_fuzz.sh $(FUZZ_BUILD) 15 $(FUZZ_CI_TARGETS)

# ---- install ---------------------------------------------------------------
# The Python binding (python/psclient, ctypes over the shared library) goes
# to a folder that Debian's python3 searches when PREFIX is /usr and that
# fits every python3 version; with another PREFIX, add it to PYTHONPATH.
# Its _config.py names LIBDIR relative to the package, so a DESTDIR tree or
# a moved prefix finds its own library.
PYDIR  ?= $(PREFIX)/lib/python3/dist-packages
PY_SRC := python/psclient/__init__.py python/psclient/_lib.py python/psclient/export.py

UNITDIR ?= $(PREFIX)/lib/systemd/system

# psclient.pc and the unit are written here, from the PREFIX and LIBDIR of
# this command (not those of an earlier `make`).
install: $(PSD) $(PSCTL) $(SOLIB) $(ALIB)
	@test -n "$(PC_LIBS)" || { echo "make install: pkg-config cannot resolve" \
	    "libpsclient's dependencies ($(PC_DEPS)) for psclient.pc: is" \
	    "PKG_CONFIG_PATH kept (sudo resets it)?" >&2; exit 1; }
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(LIBDIR)/pkgconfig
	install -d $(DESTDIR)$(UNITDIR)
	install -m 755 $(PSD) $(DESTDIR)$(PREFIX)/bin/psd
	install -m 755 $(PSCTL) $(DESTDIR)$(PREFIX)/bin/psctl
	sed 's#/usr/local/bin/#$(PREFIX)/bin/#g' conf/psd.service > $(DESTDIR)$(UNITDIR)/psd.service
	chmod 644 $(DESTDIR)$(UNITDIR)/psd.service
	install -m 644 client/psclient.h $(DESTDIR)$(PREFIX)/include/psclient.h
	# 644, as Debian installs shared libraries: loaded, never executed
	install -m 644 $(SOLIB) $(DESTDIR)$(LIBDIR)/libpsclient.so.$(VERSION)
	ln -sf libpsclient.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libpsclient.so.$(SOVERSION)
	ln -sf libpsclient.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libpsclient.so
	# an earlier release's library (libpsclient.so.0.N.M, digits only: not a
	# backup or a dpkg file beside it), once the links name the new one
	find $(DESTDIR)$(LIBDIR) -maxdepth 1 -regex \
	    '.*/libpsclient\.so\.$(SOVERSION)\.[0-9]+\.[0-9]+' \
	    ! -name 'libpsclient.so.$(VERSION)' -delete
	install -m 644 $(ALIB) $(DESTDIR)$(LIBDIR)/libpsclient.a
	sed $(PC_SED) client/psclient.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/psclient.pc
	# written through the shell: 644 whatever the umask (0600 under umask
	# 077 left pkg-config and `import psclient` to root: an install trial)
	chmod 644 $(DESTDIR)$(LIBDIR)/pkgconfig/psclient.pc
	install -d $(DESTDIR)$(PYDIR)/psclient
	install -m 644 $(PY_SRC) $(DESTDIR)$(PYDIR)/psclient/
	printf '# Written by make install: libpsclient.so.0 is in this folder,\n# relative to the package.\nLIBDIR = "%s"\n' \
	    "$$(realpath -ms --relative-to='$(PYDIR)/psclient' '$(LIBDIR)')" \
	    > $(DESTDIR)$(PYDIR)/psclient/_config.py
	chmod 644 $(DESTDIR)$(PYDIR)/psclient/_config.py

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/psd $(DESTDIR)$(PREFIX)/bin/psctl \
	      $(DESTDIR)$(UNITDIR)/psd.service $(DESTDIR)$(PREFIX)/include/psclient.h \
	      $(DESTDIR)$(LIBDIR)/libpsclient.so.$(SOVERSION) \
	      $(DESTDIR)$(LIBDIR)/libpsclient.so $(DESTDIR)$(LIBDIR)/libpsclient.a \
	      $(DESTDIR)$(LIBDIR)/pkgconfig/psclient.pc
	find $(DESTDIR)$(LIBDIR) -maxdepth 1 -regex \
	    '.*/libpsclient\.so\.$(SOVERSION)\.[0-9]+\.[0-9]+' -delete
	rm -rf $(DESTDIR)$(PYDIR)/psclient

clean:
	rm -rf build build-san build-tsan build-fuzz

help:
	@echo 'make run          a 2-node cluster from conf/ trains on Fashion-MNIST (2 workers)'
	@echo 'make test         builds everything and runs the whole suite'
	@echo 'make all          psd, psctl, libpsclient (.so, .a, .pc), the example trainers'
	@echo 'make sanitize     the suite under ASan + UBSan (build-san/)'
	@echo 'make tsan         the suite under ThreadSanitizer (build-tsan/)'
	@echo 'make bench        benchmarks against baselines and ps-lite (PSLITE_HARNESS=DIR)'
	@echo 'make bench-durability, make bench-zerocopy   parts of make bench alone'
	@echo 'make run-modes    async, bsp and ssp training compared (about 2 minutes)'
	@echo 'make run-sparse   sparse logistic regression on Reuters (downloads its data)'
	@echo 'make run-torch    a PyTorch CNN whose parameters live in psd'
	@echo 'make run-faults   the Fashion-MNIST demo through dropped frames and a node restart'
	@echo 'make run-cluster  nodes and workers in network namespaces, with a token (root)'
	@echo 'make soak         rounds of random faults under ASan (SOAK_ROUNDS, SOAK_SEED)'
	@echo '  run, run-modes, run-sparse: RUN_INI, MODES_INI, SPARSE_INI (another cluster:'
	@echo '  its own ports and data_dir; logs in build/runs/), SPARSE_EPOCHS, REUTERS_DIR;'
	@echo '  run-faults, run-torch and the tests: PSD_TEST_PORTS=LO-HI (the ports they pick)'
	@echo 'make fuzz         the libFuzzer targets (clang; fuzz-build, fuzz-seeds)'
	@echo 'make fuzz-ci      the quick fuzz targets for 15 s each'
	@echo 'make deps         installs the Debian packages the build and tests need'
	@echo 'make install, make uninstall   PREFIX (/usr/local), LIBDIR, DESTDIR, UNITDIR, PYDIR'
	@echo 'make clean        removes build/, build-san/, build-tsan/, build-fuzz/'
