# Sundial — build, test and benchmark targets. Everything runs with the Go
# toolchain alone; `make test` is what CI runs.
GO        ?= go
PKGS      ?= ./...
BENCHCOUNT ?= 6
FUZZTIME  ?= 10s

.PHONY: all run test vet fmtcheck build bench fuzz stress generate clean

all: test

## run: start the shop sample on its embedded default config
run:
	$(GO) run ./samples/shop serve

## test: vet, gofmt check, and every test with the race detector
test: vet fmtcheck
	$(GO) test -race -count=1 -timeout 10m $(PKGS)

vet:
	$(GO) vet $(PKGS)

fmtcheck:
	@out="$$(gofmt -l . )"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## build: build the sample binaries into bin/
build:
	$(GO) build -o bin/shop ./samples/shop

## bench: run the benchmarks with -benchmem, $(BENCHCOUNT) times (feed to benchstat)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) $(PKGS)

clean:
	rm -rf bin
