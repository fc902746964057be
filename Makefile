# Sundial — build, test and benchmark targets. Everything runs with the Go
# toolchain and three Debian packages the tests start themselves (redis-server,
# protoc, chromium: `make deps`); `make test` is what CI runs.
GO        ?= go
PKGS      ?= ./...
BENCHCOUNT ?= 6
BENCH     ?= .
BENCHPKGS ?= ./kernel ./adapters ./adapters/grpcadapter ./adapters/connectadapter ./samples/shop/systemtest
FUZZTIME  ?= 10s

.PHONY: all run test deps vet fmtcheck build bench bench-overload fuzz stress generate clean conformance

all: test

## run: start the shop sample on its embedded default config, bound to
## loopback (HTTP 127.0.0.1:5000, gRPC 127.0.0.1:5001); listen elsewhere
## with e.g. `make run HTTP_ADDR=:5000 GRPC_ADDR=:5001`
HTTP_ADDR ?= 127.0.0.1:5000
GRPC_ADDR ?= 127.0.0.1:5001
run:
	$(GO) run ./samples/shop serve --http $(HTTP_ADDR) --grpc $(GRPC_ADDR)

## test: gofmt check, and every test with the race detector, each package
## vetted first with every vet check (-vet=all: one build serves both) (first
## installs redis-server, protoc, chromium, npm and curl with apt-get when they are
## missing and it can; see .ci/deps)
test: deps fmtcheck
	$(GO) test -race -vet=all -count=1 -timeout 10m $(PKGS)

## deps: the system programs the tests need (redis-server, protoc, chromium,
## node, npm and curl), the MCP inspector CLI, @grpc/grpc-js and the connect-web
## test's packages (npm)
deps:
	@.ci/deps

vet:
	$(GO) vet $(PKGS)

fmtcheck:
	@out="$$(gofmt -l . )"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## build: build the sample binaries into bin/
build:
	$(GO) build -o bin/shop ./samples/shop

## conformance: the Connect conformance suite's runner (connectconformance,
## installed from the module proxy into bin/, outside go.mod) in server mode
## against samples/conformance, with the features it claims and its argued
## exclusions (samples/conformance/*.yaml, *.txt; see docs/connect.md)
CONFORMANCE_VERSION ?= v1.0.7
conformance:
	GOBIN=$(CURDIR)/bin $(GO) install connectrpc.com/conformance/cmd/connectconformance@$(CONFORMANCE_VERSION)
	$(GO) build -o bin/conformance ./samples/conformance
	bin/connectconformance --mode server --conf samples/conformance/config.yaml \
		--known-failing @samples/conformance/known-failing.txt \
		--known-flaky @samples/conformance/known-flaky.txt -- bin/conformance

## bench: the main suites (pipeline vs its floors, rejections, limits,
## telemetry, HTTP, gRPC and Connect vs bare servers, typed clients vs calls
## by hand; about 5 minutes on 2 cores) with
## -benchmem, $(BENCHCOUNT) rounds of one run each in a fresh process, for
## benchstat (see docs/performance.md): the cases compared with one another
## are measured seconds apart in every round, so their ratios do not drift
## with the machine's load. Narrow with BENCH=regexp, widen with
## BENCHPKGS=./... (every package's benchmarks).
bench:
	@for i in $$(seq $(BENCHCOUNT)); do \
		$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count 1 -timeout 30m $(BENCHPKGS) || exit 1; \
	done

## bench-overload: Sundial's adaptive and static concurrency limits beside
## failsafe-go's adaptivelimiter, kratos BBR and go-zero's AdaptiveShedder,
## each in front of the same simulated backend at 1x, 2x and 4x overload and
## through a 5x slowdown (in process, about 3 minutes, stops by itself; see
## docs/performance.md). It is a module of its own, so `make test` and the
## root go.mod never see the peers. Pass flags with OVERLOAD_FLAGS, e.g.
## OVERLOAD_FLAGS='-scale 0.2' for a smoke run.
OVERLOAD_FLAGS ?=
bench-overload:
	cd samples/overload && $(GO) run . $(OVERLOAD_FLAGS)

## fuzz: run each fuzz target for $(FUZZTIME), one after the other (`make test`
## runs their committed seed corpora in testdata/fuzz)
FUZZ_TARGETS = \
	./operations:FuzzValidateID \
	./kernel/internal/priority:FuzzParsePriority \
	./operations:FuzzFastPathAgrees \
	./operations:FuzzCheckJSONAgrees \
	./kernel:FuzzConfig \
	./adapters/httpadapter:FuzzParseDeadline \
	./adapters/httpadapter:FuzzParseTimeoutMs \
	./adapters/httpadapter:FuzzBind \
	./adapters/cliadapter:FuzzDecodeInput \
	./adapters/cliadapter:FuzzParseTimeout \
	./adapters/grpcadapter:FuzzDecode \
	./resilience/internal/limitkey:FuzzCheck \
	./samples/shop/systemtest:FuzzShopOrderInput

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg, $(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

## stress: the shop under 20,000 requests from 200 clients on 127.0.0.1,
## then a healthy client beside slowloris, a gRPC stall flood, a rapid reset
## and a straggler flood, the shop and the attackers on CPUs of their own
## where taskset allows; then 10,000 idle streams beside unary calls
## (build tag `stress`; bounded, stops by itself, prints its figures).
## STRESS_ROUNDS rounds of each attack (a window alone, then one under
## attack): the 2x bound is on the median of their p99 ratios
STRESS_ROUNDS ?= 3
stress:
	STRESS_ROUNDS=$(STRESS_ROUNDS) $(GO) test -tags stress -run '^TestStress' -count=1 -v -timeout 40m ./samples/shop/systemtest

clean:
	rm -rf bin
