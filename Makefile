# leasehold — build and test.
GO      ?= go
PKGS    := ./...
# Test time budget: the whole suite must stay well under 15 minutes on 2 cores.
TESTFLAGS ?= -race -count=1 -timeout 20m

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: all build test test-short vet fmt bench-fsm fuzz generate dev chaos chaos-bins soak bench upgrade-test

all: build

# bin/leasehold, the server and the CLI.
build:
	$(GO) build $(PKGS)
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/leasehold ./cmd/leasehold

# A real 3-node cluster on loopback, data in a temporary directory; Ctrl-C
# stops it. The CLI's default endpoints are its API ports.
dev: build
	./bin/leasehold dev

# The one test command: vet, then every package's tests with the race detector.
# The server the tests run as processes is built once, here, for every
# package (LEASEHOLD_TEST_BIN; without it each test process builds its own).
test: vet
	$(GO) build -o bin/leasehold-test ./cmd/leasehold
	LEASEHOLD_TEST_BIN=$(CURDIR)/bin/leasehold-test $(GO) test $(TESTFLAGS) $(PKGS)
	# Our copy of hashicorp/raft is a module of its own: its tests of our changes.
	$(GO) test -C third_party/raft $(TESTFLAGS) -run Leasehold .
	$(GO) test $(TESTFLAGS) -tags chaos -run 'TestSkewClock' ./cmd/leasehold

test-short:
	$(GO) test -short -count=1 $(PKGS)

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }
	$(GO) vet $(PKGS)
	# Off Linux: everything builds and vets on macOS and Windows (Linux-only
	# parts sit behind build tags with stand-ins that say so).
	GOOS=darwin $(GO) vet ./...
	GOOS=windows $(GO) vet ./...

# The short load sweep: every workload of `leasehold bench` at c = 1, 16
# and 64, each against a fresh local 3-node cluster (--start 3), then one
# table of the RESULT lines (kept in bin/bench/results.txt). Several
# minutes. docs/performance.md explains the figures and the long sweep.
BENCH_DURATION ?= 5s
BENCH_WARMUP   ?= 1s
BENCH_FLAGS    ?=
bench:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/leasehold ./cmd/leasehold
	BIN=bin/leasehold DURATION=$(BENCH_DURATION) WARMUP=$(BENCH_WARMUP) EXTRA="$(BENCH_FLAGS)" sh bench/sweep.sh

# State machine benchmarks, including the 1,000,000-job snapshot (a few minutes).
bench-fsm:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 1x ./fsm/ -timeout 60m

# Fuzz every decoder, FUZZTIME each: log entries (decode + apply),
# snapshots, and the API's requests. Minimizing a new input re-runs it
# thousands of times on inputs of tens of kilobytes (snapshots), so
# minimization is kept short.
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeApply$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./fsm/
	$(GO) test -run '^$$' -fuzz '^FuzzRestore$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./fsm/
	$(GO) test -run '^$$' -fuzz '^FuzzRequestDecoders$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./cluster/api/

# Regenerate the API's Go code from transport/proto (needs protoc: apt-get
# install protobuf-compiler; the Go plugins are pinned in go.mod's tool block).
PROTO_DIR := transport/proto
generate:
	rm -rf transport/gen
	mkdir -p transport/gen
	PATH="$$(dirname $$($(GO) tool -n protoc-gen-go)):$$(dirname $$($(GO) tool -n protoc-gen-connect-go)):$$PATH" \
	protoc -I $(PROTO_DIR) \
		--go_out=transport/gen --go_opt=paths=source_relative \
		--connect-go_out=transport/gen --connect-go_opt=paths=source_relative \
		$$(find $(PROTO_DIR) -name '*.proto' | sort)

# jepsen-lite: leasehold built with the clock seam (-tags chaos) and once
# per broken guarantee, and the runner itself.
CHAOS_OUT ?= /tmp/leasehold-chaos
# The broken builds beside the first three (bin/leasehold-chaos-NAME, tag
# chaos_NAME); chaos_noselfstop breaks the Go worker, so it is a jepsen-lite
# build (bin/jepsen-lite-noselfstop), whose worker processes run it.
BROKEN := earlyack stalereads doublegrant tokenreuse noreportid norelease openpeer nodelay refire
chaos-bins:
	$(GO) build -tags chaos -o bin/leasehold-chaos ./cmd/leasehold
	$(GO) build -tags chaos,chaos_nofence -o bin/leasehold-chaos-nofence ./cmd/leasehold
	$(GO) build -tags chaos,chaos_noabsence -o bin/leasehold-chaos-noabsence ./cmd/leasehold
	$(GO) build -tags chaos,chaos_noverify -o bin/leasehold-chaos-noverify ./cmd/leasehold
	for b in $(BROKEN); do $(GO) build -tags chaos,chaos_$$b -o bin/leasehold-chaos-$$b ./cmd/leasehold || exit 1; done
	$(GO) build -o bin/jepsen-lite ./jepsen-lite/cmd/jepsen-lite
	$(GO) build -tags chaos_noselfstop -o bin/jepsen-lite-noselfstop ./jepsen-lite/cmd/jepsen-lite

# The CI profile (about 16 minutes on 2 cores): the real build under every
# fault family must show no violation, each broken build must be caught.
# Histories, logs and reports are left in CHAOS_OUT.
chaos: chaos-bins
	rm -rf $(CHAOS_OUT)
	./bin/jepsen-lite profile --bin-dir bin --out $(CHAOS_OUT) ci

# Rolling upgrades: a 3-node cluster with one node on an older build must
# refuse what that node could not apply, apply the rest as it does, and
# accept everything once that node runs this build. UPGRADE_FROM is the last
# build before levels, UPGRADE_FROM5 the last at level 5 (before dead
# letters, timeouts, queues and schedules). About two minutes (the old
# builds' compiles). Skipped when the clone lacks a commit (shallow).
UPGRADE_FROM ?= d2e45cb
UPGRADE_FROM5 ?= f0a85fb
upgrade-test:
	@for c in $(UPGRADE_FROM) $(UPGRADE_FROM5); do if ! git cat-file -e $$c^{commit} 2>/dev/null; then \
		echo "upgrade-test: skipped: commit $$c is not in this clone"; exit 0; fi; done; \
	set -e; tmp=$$(mktemp -d); trap 'git worktree remove --force $$tmp/src >/dev/null 2>&1; git worktree remove --force $$tmp/src5 >/dev/null 2>&1; rm -rf $$tmp' EXIT; \
	git worktree add -q --detach $$tmp/src $(UPGRADE_FROM); \
	(cd $$tmp/src && $(GO) build -o $$tmp/leasehold-old ./cmd/leasehold); \
	git worktree add -q --detach $$tmp/src5 $(UPGRADE_FROM5); \
	(cd $$tmp/src5 && $(GO) build -o $$tmp/leasehold-old5 ./cmd/leasehold); \
	LEASEHOLD_E2E_OLD_BIN=$$tmp/leasehold-old LEASEHOLD_E2E_OLD5_BIN=$$tmp/leasehold-old5 \
		$(GO) test -count=1 -run 'TestMixedCluster' ./cmd/leasehold/e2e

# The long profile: 5 nodes, production timings, every family mixed, an hour.
soak: chaos-bins
	rm -rf $(CHAOS_OUT)-soak
	./bin/jepsen-lite profile --bin-dir bin --out $(CHAOS_OUT)-soak soak
