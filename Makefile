# The test command the README and CI use: sudo make test. As root it
# installs what the tests need (scripts/test-deps) and runs every test,
# the privileged ones (namespaces, TUN, AF_XDP) included; as another user
# those skip and say why.
GO ?= go

.PHONY: test deps check bench udpfwd
test: deps check
	$(GO) test -race -count=1 ./...

deps:
	@scripts/test-deps

# Formatting, vet, and the portable build: the pipeline and the pure
# packages build everywhere, the Linux ports return "not supported".
check:
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	GOOS=windows $(GO) build ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./segment ./txqueue

# udpfwd drops capabilities on every thread, which needs a cgo-free build.
udpfwd:
	CGO_ENABLED=0 $(GO) build -o udpfwd ./cmd/udpfwd
