# h5ingest: build, test and demonstrate on a Debian 12 machine.
#
#   make demo    a whole scan on the built-in simulator, ending in a verified HDF5 file
#   make test    vet, format check, unit and cross-reader tests, race detector, short fuzz runs
#
# Run as root on a fresh machine, both install the Debian packages they need.

GO       ?= go
BIN      := bin/h5ingest
FUZZTIME ?= 2s
OUT      ?= out

# examples/extend is a module of its own, as a facility's would be (its
# go.mod replaces h5ingest with this tree): go vet ./... and go test ./...
# here leave it out, so deps, vet and unit cover it too (fmt-check does
# already: it checks every Go file git tracks).
EXTEND := examples/extend

# Debian packages: C libraries for cgo (libibverbs-dev: the headers of the
# roce source's verbs table, whose library is opened at run time), and the
# independent readers the
# tests compare against (h5py + hdf5plugin, the C bitshuffle library,
# dxchange, h5dump), headless chromium for the status page test, and
# libzmq with the Python stream consumer's zmq and cbor2, the OpenAPI 3.0
# schema and a validator for the service's 3.0 document, and systemd's
# analyzer for the service unit; Python's zstandard, with which
# examples/extend's test reads its zstd chunks where Debian's hdf5plugin
# has no zstd filter; and the C LZ4 library's headers, against whose
# blocks the tests hold h5ingest's LZ4 (compress/internal/clz4).
DEBS := gcc pkg-config libhdf5-dev hdf5-tools libfabric-dev libfabric-bin libibverbs-dev clang-16 \
	python3-numpy python3-h5py python3-hdf5plugin bitshuffle python3-crcmod python3-zstandard \
	python3-dxchange python3-tifffile python3-pandas chromium \
	libzmq3-dev python3-zmq python3-cbor2 liblz4-dev \
	openapi-specification python3-jsonschema systemd

.PHONY: all build deps test vet fmt-check unit unit-rest race fuzz ptx-check demo bench-codecs clean api

all: build

# apt waits up to APT_LOCK_WAIT seconds for another apt or dpkg (an
# unattended upgrade) to let go of the package locks, instead of failing.
export APT_LOCK_WAIT ?= 600
APT := tools/apt.sh

deps:
	@missing=$$(for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "installing Debian packages:" $$missing; \
			$(APT) update -qq && DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq $$missing >/dev/null; \
		else \
			echo "missing Debian packages:" $$missing "(run make as root, or apt-get install them)"; exit 1; \
		fi; \
	fi
	@# Every module the build and the tests need, so that make test runs
	@# offline after make demo (go vet would otherwise fetch test-only ones),
	@# those of the example facility's module (examples/extend) included.
	$(GO) mod download
	cd $(EXTEND) && $(GO) mod download

# The version --version prints and every file and capture records.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)

build: deps
	$(GO) build -ldflags "-X h5ingest/version.version=$(VERSION)" -o $(BIN) ./cmd/h5ingest

vet:
	$(GO) vet ./...
	cd $(EXTEND) && $(GO) vet ./...

fmt-check:
	@bad=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$bad" ]; then echo "not gofmt-formatted:" $$bad; exit 1; fi

unit:
	$(GO) test -count=1 ./...
	cd $(EXTEND) && $(GO) test -count=1 ./...

# The facility API's listing (api/facility.txt), written anew once
# CHANGELOG.md names each changed name; TestFacilityAPI compares it.
api:
	$(GO) run ./tools/apilist -w

# The packages whose goroutines share state, under the race detector.
RACE_PKGS := ./pipeline ./scan ./service ./source/fabric ./source/roce ./source/capture ./instrument ./status ./stream

race:
	$(GO) test -race -count=1 $(RACE_PKGS)

# unit-rest is unit less RACE_PKGS: the tests race does not run.
unit-rest:
	$(GO) test -count=1 $(filter-out $(RACE_PKGS:./%=h5ingest/%),$(shell $(GO) list ./...))
	cd $(EXTEND) && $(GO) test -count=1 ./...

# Every fuzz target, each for FUZZTIME (make fuzz FUZZTIME=10m for a
# longer search), starting from its committed corpus; go test runs the
# corpus itself as tests.
fuzz:
	@tools/fuzz.sh $(FUZZTIME)

# make test runs each test once: those of RACE_PKGS under the race
# detector (race), the others without it (unit-rest), the two side by
# side, as neither keeps two cores busy alone (much of a scan test's time
# is waiting: for frames at a detector's pace, a sender, a timeout).
test: deps vet fmt-check ptx-check gpu-binaries fuzz
	@$(MAKE) --no-print-directory -j2 -Oline race unit-rest

# The simulated scan's plan: the capture records it, and replay, given no
# plan, writes the file by it (darks and flats keyed, angles set).
DEMO_PLAN := --darks 10 --flats 10 --projections 120 --angle-start 0 --angle-end 180

demo: build
	@mkdir -p $(OUT)
	$(BIN) simulate --scene tomo $(DEMO_PLAN) -o $(OUT)/demo.pmcap --overwrite
	$(BIN) replay $(OUT)/demo.pmcap --profile default -o $(OUT)/demo.h5 --overwrite
	$(BIN) verify $(OUT)/demo.h5
	$(BIN) inspect $(OUT)/demo.h5

bench-codecs: deps
	tools/bench-codecs/run.sh

# The GPU checks' test binaries, for a machine with only the NVIDIA driver:
# carry bin/gpu there and run tools/gpu/run.sh (see docs/gpu.md). They are
# built with cgo, checked to be (go version -m), to link only libc, and the
# newest glibc symbol version they need is written to bin/gpu/glibc.txt.
# make test builds them too, so that the kit cannot break unseen (and
# go test ./tools/gpu checks that they are the binaries run.sh runs).
# h5ingest itself, stripped, goes with the shared libraries it needs but
# glibc in bin/gpu/h5ingest.tar.gz, for tools/gpu/first-contact.sh; the
# kit and the tracked files must stay under the 64 MiB a call carries.
# The kit is built again only when a source file, a script of the kit or
# the version changed since the last (bin/gpu/.built). Its sources: the
# files git tracks, or would, but the documents and the example
# facility's module (Go files, the files they embed, the kit's scripts).
GPU_KIT_SOURCES = $(wildcard $(shell git ls-files -co --exclude-standard -- ':!docs' ':!*.md' ':!$(EXTEND)'))

.PHONY: gpu-binaries
gpu-binaries: bin/gpu/.built
bin/gpu/.built: $(GPU_KIT_SOURCES) bin/gpu/version
	CGO_ENABLED=1 $(GO) test -c -o bin/gpu/gpu.test ./gpu/cuda
	CGO_ENABLED=1 $(GO) test -c -o bin/gpu/gpu-backends.test ./gpu
	CGO_ENABLED=1 $(GO) test -c -o bin/gpu/pipeline.test ./pipeline
	GO=$(GO) tools/gpu/check-binaries.sh bin/gpu
	CGO_ENABLED=1 $(GO) build -ldflags "-s -w -X h5ingest/version.version=$(VERSION)" -o bin/h5ingest-gpu ./cmd/h5ingest
	tools/gpu/pack-h5ingest.sh bin/h5ingest-gpu bin/gpu/h5ingest.tar.gz
	@touch $@

# bin/gpu/version holds the version the kit's h5ingest was built as; it
# changes (and the kit is built again) only when VERSION does.
bin/gpu/version: FORCE
	@mkdir -p bin/gpu
	@echo '$(VERSION)' | cmp -s - $@ || echo '$(VERSION)' > $@

.PHONY: FORCE
FORCE:

clean:
	rm -rf bin $(OUT)

# The committed PTX of the CUDA kernels, for sm_70 and sm_90, must be what
# their source compiles to with clang-16 (regenerate with: go generate
# ./gpu/kernels).
ptx-check: deps
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	for t in decode.ptx:sm_70 decode_sm90.ptx:sm_90; do \
		f=$${t%%:*}; gpu/kernels/gen.sh "$$tmp/$$f" $${t#*:} || exit 1; \
		if ! cmp -s "$$tmp/$$f" gpu/kernels/$$f; then \
			echo "gpu/kernels/$$f is not what decode.cu compiles to: run go generate ./gpu/kernels"; \
			diff "$$tmp/$$f" gpu/kernels/$$f | head -20; exit 1; \
		fi; \
	done; echo "ptx-check: gpu/kernels/decode.ptx and decode_sm90.ptx are current"

# h5ingest bench: replay to bitshuffle-LZ4 HDF5 against h5py + hdf5plugin and
# the C bitshuffle library, on the same simulated Pi-mega frames, BENCH_FRAMES
# per row, in BENCH_ROUNDS interleaved rounds, files on /dev/shm (and one row
# on disk, fsync'ed). tools/bench/profile.sh profiles the replay;
# tools/bench/startup.sh times the start of the command.
BENCH_FRAMES ?= 200
BENCH_ROUNDS ?= 5

.PHONY: bench
bench: build
	$(BIN) bench --frames $(BENCH_FRAMES) --rounds $(BENCH_ROUNDS)

# make install: the command, the serve service's systemd unit and user, a
# settings file (only where there is none) and the documentation, under
# DESTDIR (for a package) and PREFIX. docs/deploying.md lists what goes
# where; go test ./deploy checks it and the unit.
PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
BINDIR     := $(PREFIX)/bin
UNITDIR    := $(PREFIX)/lib/systemd/system
DOCDIR     := $(PREFIX)/share/doc/h5ingest

.PHONY: install
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/h5ingest
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR) $(DESTDIR)$(SYSCONFDIR)/sysusers.d $(DESTDIR)$(SYSCONFDIR)/default
	sed -e 's|/usr/local/bin/h5ingest|$(BINDIR)/h5ingest|' -e 's|/usr/local/share/doc/h5ingest|$(DOCDIR)|' \
		deploy/h5ingest-serve.service > $(DESTDIR)$(UNITDIR)/h5ingest-serve.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/h5ingest-serve.service
	install -m 0644 deploy/h5ingest.sysusers $(DESTDIR)$(SYSCONFDIR)/sysusers.d/h5ingest.conf
	test -e $(DESTDIR)$(SYSCONFDIR)/default/h5ingest-serve || \
		install -m 0644 deploy/h5ingest-serve.env $(DESTDIR)$(SYSCONFDIR)/default/h5ingest-serve
	install -m 0644 README.md docs/*.md $(DESTDIR)$(DOCDIR)/
