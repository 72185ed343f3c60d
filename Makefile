# make test   installs redis-server if it is missing (as root, from Debian's
#             packages), then vets and runs every test with the race detector.
# make build  builds the static binary the Dockerfile ships.
# make bench  runs the Go benchmarks.

GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: test build release bench redis-server

# go mod download fetches every module go.mod lists, not only those the
# build needs: the k8s tests rehearse the image build with GOPROXY=off, and
# a build context that lacks a package makes Go look up modules (such as
# github.com/kr/pretty) that no build of ours downloads.
test: redis-server
	$(GO) mod download
	cd k8s && $(GO) mod download
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	cd k8s && $(GO) vet ./... && $(GO) test -count=1 -timeout 5m ./...

# Tests start their own redis-server processes on free loopback ports; this
# only makes sure the binaries exist.
redis-server:
	@if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then \
		if [ "$$(id -u)" -ne 0 ]; then \
			echo "redis-server is missing: run 'sudo apt-get install -y redis-server redis-tools' or make test as root" >&2; exit 1; \
		fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools; \
	fi

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/ratelimit-sidecar ./cmd/ratelimit-sidecar

release: build

bench: redis-server
	$(GO) test -run '^$$' -bench . -benchmem ./...
