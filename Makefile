# The project's checks. `make test` is what CI runs (.ci/run).
#
#   make test                      everything: deps, vet, gofmt, tests, fuzz
#   make test PKGS='./ceph/... ./internal/...'   the same on some packages
#   make unit                      just the tests
#   make bench-check               the benchmark harness (bench/peers) checked
#   make contrib-check             contrib/prometheus (a module of its own) tested
#   make fuzz FUZZTIME=30s         longer fuzzing

GO       ?= go
PKGS     ?= ./...
FUZZTIME ?= 5s
FUZZBUDGET ?= 100
TIMEOUT  ?= 20m

# Directories for gofmt and fuzz discovery: "./x/..." -> "./x", "./..." -> ".".
DIRS := $(patsubst %/...,%,$(PKGS))
DIRS := $(patsubst ...,.,$(DIRS))

.PHONY: test deps vet fmt cross unit flood bench-check contrib-check fuzz

# The steps of test run in order even under make -j.
.NOTPARALLEL:

test: deps vet fmt cross unit flood bench-check contrib-check fuzz

deps:
	scripts/install-deps.sh

vet:
	$(GO) vet $(PKGS)

fmt:
	@out=$$(gofmt -l $(DIRS)); \
	if [ -n "$$out" ]; then echo "gofmt -l reports unformatted files:"; echo "$$out"; exit 1; fi

# The library and the CLI build for macOS and Windows too (without the
# Linux-only shm transport and direct path).
cross:
	GOOS=darwin $(GO) build $(PKGS)
	GOOS=windows $(GO) build $(PKGS)

unit:
	FERRY_REQUIRE_CEPH=1 FERRY_REQUIRE_TOOLS=1 $(GO) test -race -count=1 -timeout $(TIMEOUT) $(PKGS)

# The flood tests of issue 18 once more without -race (under -race the
# RPC and bulk floods are skipped: race-built flooders are too slow to
# flood), alone, so that the figures they log are those of this build.
flood:
	@log=$$(mktemp); $(GO) test -count=1 -timeout 5m -run '^TestFlood' -v ./cmd/ferry >$$log 2>&1; st=$$?; \
	grep -E '^(---|ok|FAIL|PASS|panic)|flood_test.go' $$log; [ $$st -eq 0 ] || tail -50 $$log; rm -f $$log; exit $$st

# The benchmark harness of bench/peers (its own module, with gRPC-Go):
# vetted, and its contenders checked once each (TestHarness,
# TestBulkHarness), so that a benchmark never measures wrong bytes.
bench-check:
	cd bench/peers && $(GO) vet . && $(GO) test -race -count=1 -run 'Harness' .

# contrib/prometheus (its own module, with client_golang): vetted and
# tested, including the scrape of ferry serve --metrics parsed by
# Prometheus's text parser.
contrib-check:
	cd contrib/prometheus && $(GO) vet . && $(GO) test -race -count=1 .

fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZBUDGET=$(FUZZBUDGET) scripts/fuzz.sh $(DIRS)
