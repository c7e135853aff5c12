# beamprobe -- top-level build.  `make` builds everything; `make test` is the
# one command that runs every test suite on a fresh clone; `make deps`
# installs the Debian packages a fresh Debian 12 machine lacks.

ERLC ?= erlc
ERLC_FLAGS := +warnings_as_errors +debug_info +warn_missing_spec -I include -pa ebin
ERL_SRC := $(wildcard src/*.erl)
BEAMS := $(patsubst src/%.erl,ebin/%.beam,$(ERL_SRC))

# Debian packages needed to build, test, benchmark and demo.
DEB_PKGS := erlang-base erlang-dev erlang-runtime-tools erlang-eunit \
	erlang-common-test erlang-dialyzer erlang-tools erlang-syntax-tools \
	erlang-parsetools rebar3 babeltrace2 gcc make libc6-dev valgrind \
	python3 clang bc time chromium elixir python3-bt2 liblttng-ust-dev \
	lttng-tools systemtap-sdt-dev systemtap bpftrace gdb erlang-edoc man-db \
	bsdextrautils git
DEB_CMDS := erl erlc babeltrace2 gcc ct_run dtrace

# speedscope, for test/browser/run.sh: the npm package, installed locally.
SPEEDSCOPE_VERSION := 1.25.0
SPEEDSCOPE_INDEX := _build/npm/node_modules/speedscope/dist/release/index.html

all: c erl cli chunks

c:
	$(MAKE) -C c_src all

cli:
	$(MAKE) -C c_src/cli all

erl: $(BEAMS) ebin/beamprobe.app

ebin/%.beam: src/%.erl $(wildcard include/*.hrl)
	@mkdir -p ebin
	$(ERLC) $(ERLC_FLAGS) -o ebin $<

# Behaviour modules first.
ebin/beamprobe_printer.beam: ebin/beamprobe_handler.beam

# EEP-48 doc chunks (doc/chunks/MOD.chunk next to ebin/, where
# code:get_doc/1 finds them): h(beamprobe, calls) in erl, h :beamprobe.calls
# in iex.  Built from the edoc of every module; an edoc error fails.
CHUNKS_STAMP := doc/chunks/.built
EDOC_CHUNKS := try edoc:files(init:get_plain_arguments(), [{doclet, edoc_doclet_chunks}, {layout, edoc_layout_chunks}, {dir, "doc"}, {preprocess, true}, {includes, ["include"]}]) of ok -> halt(0) catch C:R -> io:format("edoc: ~p:~p~n", [C, R]), halt(1) end.

chunks: $(CHUNKS_STAMP)

# edoc_layout_chunks writes a ```...''' block as {pre, [], [Text]}; the
# application/erlang+html format (and Elixir's IEx, which showed the
# <pre> tags as text in h :beamprobe.calls) has {pre, [], [{code, [], ...}]}:
# scripts/chunks_pre_code.escript wraps them.
$(CHUNKS_STAMP): $(ERL_SRC) $(wildcard include/*.hrl) scripts/chunks_pre_code.escript
	@mkdir -p doc/chunks
	erl -noshell -eval '$(EDOC_CHUNKS)' -extra $(ERL_SRC)
	escript scripts/chunks_pre_code.escript doc/chunks/*.chunk
	@touch $@

# The .app: src/beamprobe.app.src with its modules filled in (as rebar3
# and mix do), so that releases (systools, relx) find every module.
APP_MODULES := {ok, [{application, A, P}]} = file:consult("src/beamprobe.app.src"), Ms = [list_to_atom(filename:basename(F, ".erl")) || F <- lists:sort(init:get_plain_arguments())], ok = file:write_file("ebin/beamprobe.app", io_lib:format("~p.~n", [{application, A, lists:keystore(modules, 1, P, {modules, Ms})}])), halt().
ebin/beamprobe.app: src/beamprobe.app.src $(ERL_SRC)
	@mkdir -p ebin
	erl -noshell -eval '$(APP_MODULES)' -extra $(ERL_SRC)

# `make install PREFIX=/usr [DESTDIR=/staging]': bin/beamprobe, its man
# page and the Erlang application (ERL_LIBDIR/beamprobe-VSN: ebin, priv,
# include, doc/chunks), all or nothing (scripts/install.sh).  With
# PREFIX=/usr the application lands in Debian's code:lib_dir()
# (/usr/lib/erlang/lib); with another PREFIX, erl finds it through
# ERL_LIBS=PREFIX/lib/erlang/lib.  `make uninstall' with the same
# variables removes it.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
ERL_LIBDIR ?= $(PREFIX)/lib/erlang/lib
DOCDIR ?= $(PREFIX)/share/doc/beamprobe
VSN := $(shell sed -n 's/^ *{vsn, *"\([^"]*\)"}.*/\1/p' src/beamprobe.app.src)
INSTALL_ENV = DESTDIR="$(DESTDIR)" BINDIR="$(BINDIR)" MANDIR="$(MANDIR)" \
	ERL_LIBDIR="$(ERL_LIBDIR)" DOCDIR="$(DOCDIR)" VSN="$(VSN)"

# The Elixir modules (Beamprobe, ...) are installed next to the Erlang
# ones when elixirc is there to build them.
install: all elixir
	$(INSTALL_ENV) sh scripts/install.sh install

uninstall:
	$(INSTALL_ENV) sh scripts/install.sh uninstall

# Installs what is missing (as root), otherwise says what to run.
deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "deps: all Debian packages present"; \
	elif [ "$$(id -u)" = 0 ]; then \
	  echo "deps: installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else echo "deps: missing$$missing"; echo "run: sudo apt-get install -y$$missing"; exit 1; fi
	@command -v npm >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; \
	  else echo "deps: missing npm"; echo "run: sudo apt-get install -y nodejs npm"; exit 1; fi; }
	@test -f $(SPEEDSCOPE_INDEX) || npm install --prefix _build/npm --no-audit --no-fund --no-save speedscope@$(SPEEDSCOPE_VERSION) >/dev/null 2>&1 || echo "deps: could not install the speedscope npm package (the browser test will skip)"

# Fails early, naming the missing command, instead of failing mid-build.
check-deps:
	@for c in $(DEB_CMDS); do command -v $$c >/dev/null || { \
	  echo "missing command: $$c (run 'make deps' as root)"; exit 1; }; done

# What is derived from the event schema of c_src/bp_format.h for what
# cannot include it: include/beamprobe_events.hrl, the tables of
# docs/format.md (between its schema:begin/end markers, and its "Format
# version: **M.m**" line) and the LTTng-UST
# tracepoint definitions c_src/lttng/bp_lttng_{tp,fire}.h (their macros
# cannot loop over the schema), all committed.
# `make schema' regenerates them; `make schema-check' (in `make test')
# fails if a committed copy is out of date.
SCHEMA_BUILD := _build/schema
SCHEMA_GEN := $(SCHEMA_BUILD)/bp_schema_gen

$(SCHEMA_GEN): c_src/tools/bp_schema_gen.c c_src/bp_format.h c_src/bp_format.c
	@mkdir -p $(SCHEMA_BUILD)
	$(CC) -std=gnu11 -Wall -Wextra -Werror -O1 -o $@ c_src/tools/bp_schema_gen.c c_src/bp_format.c

$(SCHEMA_BUILD)/beamprobe_events.hrl $(SCHEMA_BUILD)/format.md: $(SCHEMA_GEN) docs/format.md FORCE
	$(SCHEMA_GEN) hrl > $(SCHEMA_BUILD)/beamprobe_events.hrl
	$(SCHEMA_GEN) lttng-tp > $(SCHEMA_BUILD)/bp_lttng_tp.h
	$(SCHEMA_GEN) lttng-fire > $(SCHEMA_BUILD)/bp_lttng_fire.h
	$(SCHEMA_GEN) md > $(SCHEMA_BUILD)/format-tables.md
	awk -v t=$(SCHEMA_BUILD)/format-tables.md -v v=$$($(SCHEMA_GEN) version) \
	  '/^Format version: \*\*[0-9]+\.[0-9]+\*\*/ { sub(/\*\*[0-9]+\.[0-9]+\*\*/, "**" v "**") } \
	   /<!-- schema:begin/ { while ((getline l < t) > 0) print l; skip = 1; next } \
	   /<!-- schema:end -->/ { skip = 0; next } !skip' docs/format.md > $(SCHEMA_BUILD)/format.md

schema: $(SCHEMA_BUILD)/beamprobe_events.hrl $(SCHEMA_BUILD)/format.md
	cp $(SCHEMA_BUILD)/beamprobe_events.hrl include/beamprobe_events.hrl
	cp $(SCHEMA_BUILD)/format.md docs/format.md
	cp $(SCHEMA_BUILD)/bp_lttng_tp.h $(SCHEMA_BUILD)/bp_lttng_fire.h c_src/lttng/

schema-check: $(SCHEMA_BUILD)/beamprobe_events.hrl $(SCHEMA_BUILD)/format.md
	@f=0; \
	for p in include/beamprobe_events.hrl:$(SCHEMA_BUILD)/beamprobe_events.hrl \
	         docs/format.md:$(SCHEMA_BUILD)/format.md \
	         c_src/lttng/bp_lttng_tp.h:$(SCHEMA_BUILD)/bp_lttng_tp.h \
	         c_src/lttng/bp_lttng_fire.h:$(SCHEMA_BUILD)/bp_lttng_fire.h; do \
	  c=$${p%%:*}; g=$${p#*:}; \
	  if cmp -s $$c $$g; then echo "ok - $$c matches c_src/bp_format.h"; \
	  else echo "not ok - $$c is out of date: run make schema"; diff -u $$c $$g | head -20; f=$$((f + 1)); fi; \
	done; echo "schema: $$((4 - f)) passed, $$f failed"; [ $$f -eq 0 ]

# Every suite: C unit tests (ASan+UBSan, the ring under TSan), Erlang
# EUnit + Common Test, the NIF under ASan+UBSan, a short fuzz run of the
# reader, the CLI tests, a smoke run of the bench (tiny counts, no
# thresholds: the bench code cannot rot); each prints "N passed, M failed".
# Each runs under test/guard.sh (a time limit; what it leaves running
# fails it), checked first by test/guard_test.sh.  Every step runs
# even if an earlier one failed; the target fails if any did.
TEST_STEPS := "bash test/guard_test.sh" \
	"$(MAKE) schema-check" \
	"$(MAKE) -C test/c run" \
	"bash test/run_erlang_tests.sh" \
	"bash test/schema_check.sh" \
	"$(MAKE) test-asan" \
	"FUZZ_SECONDS=20 bash test/fuzz/run.sh" \
	"TZ=UTC bash test/cli/run.sh" \
	"bash test/elixir/run.sh" \
	"bash test/browser/run.sh" \
	"bash bench/run.sh smoke" \
	"bash scripts/dialyzer.sh" \
	"bash test/build/run.sh"
test: deps all
	@bash scripts/test_steps.sh $(TEST_STEPS)

# The NIF built with ASan + UBSan (_build/c/asan/beamprobe_nif.so) and the
# core Common Test suites run in a VM that loads it (test/asan/run.sh).
asan-nif:
	$(MAKE) -C c_src asan

test-asan: all asan-nif
	bash test/asan/run.sh

# The README's first command: traces a demo workload, summarises it and
# exports it for Perfetto.
demo: deps all
	bash demo/run.sh

# Fuzzes the trace decoder for FUZZ_SECONDS (default 60).
fuzz: deps
	bash test/fuzz/run.sh

bench: all
	bash bench/run.sh

dialyzer: erl
	bash scripts/dialyzer.sh

clean:
	$(MAKE) -C c_src clean
	$(MAKE) -C test/c clean
	$(MAKE) -C c_src/cli clean
	rm -rf ebin/*.beam ebin/*.app _build doc/chunks

# Targets share outputs (the NIF and its asan build write one generated
# header directory; test steps start nodes of one name): a `-j` from the
# environment must not run them side by side.
.NOTPARALLEL:

.PHONY: FORCE schema schema-check demo fuzz all c erl cli chunks install uninstall deps check-deps test test-asan asan-nif bench dialyzer clean
FORCE:

# --- Elixir (issue 11) -------------------------------------------------
# The Elixir modules of lib/ (Beamprobe, Beamprobe.Handler,
# Beamprobe.MatchSpec), compiled by elixirc with their doc chunks into
# _build/elixir/ebin -- not ebin/: the Erlang application builds and runs
# without Elixir (mix users get lib/ compiled by mix.exs).  Skipped, with
# the reason printed, where elixirc is not installed.  Their ExUnit suite,
# test/elixir/*_test.exs, runs from test/elixir/run.sh (a step of make
# test).
EX_SRC := $(wildcard lib/*.ex lib/*/*.ex)
EX_EBIN := _build/elixir/ebin
elixir: erl c
	@if command -v elixirc >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory $(EX_EBIN)/.built; \
	else echo "elixir: skipped: elixirc is not installed (Debian package elixir)"; fi
$(EX_EBIN)/.built: $(EX_SRC) $(BEAMS)
	rm -rf $(EX_EBIN) && mkdir -p $(EX_EBIN)
	elixirc --warnings-as-errors -pa ebin -o $(EX_EBIN) $(EX_SRC)
	touch $@
test-elixir: all
	bash test/elixir/run.sh
.PHONY: elixir test-elixir
