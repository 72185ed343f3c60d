# make test     installs redis-server if it is missing (as root, from Debian's
#               packages), then vets and runs every test with the race detector.
# make build    builds the static binary the Dockerfile ships, bin/ratelimit-sidecar,
#               for GOOS and GOARCH of the environment (default: this machine).
# make release  builds the same for each of PLATFORMS, as
#               bin/ratelimit-sidecar-<os>-<arch>; then, without a Docker
#               engine (k8s/release, go-containerregistry and Helm's packages):
#               the multi-arch OCI image as a layout (bin/image-oci/) and its
#               archive (bin/ratelimit-sidecar-image-oci.tar), a `docker load`
#               tarball per platform (bin/ratelimit-sidecar-image-<os>-<arch>.tar),
#               an SPDX SBOM per binary (bin/ratelimit-sidecar-<os>-<arch>.spdx.json),
#               the Helm chart (bin/ratelimit-sidecar-<chart version>.tgz), and
#               bin/SHA256SUMS of all of them. docs/releasing.md publishes them.
# make image    builds the container image with docker, named as make release
#               names it (k8s/release/imageref.go): IMAGE:<version without
#               the v> and IMAGE:dev, the name k8s/ and, for a release, the
#               chart run.
# make bench    runs the Go benchmarks.

GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION  ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS   := -s -w -X main.version=$(VERSION) -X main.revision=$(REVISION)
PLATFORMS := linux/amd64 linux/arm64
IMAGE     ?= ghcr.io/ratelimit-sidecar/ratelimit-sidecar

# go_build,OUT builds the sidecar to OUT: static (no cgo), with no local
# paths in it, stamped with the version and commit. Every binary we ship is
# built by this one command.
go_build = CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(1) ./cmd/ratelimit-sidecar

RELEASE_BINS := $(foreach p,$(PLATFORMS),bin/ratelimit-sidecar-$(subst /,-,$(p)))

.PHONY: test build release image bench redis-server FORCE

# go mod download fetches every module go.mod lists, not only those the
# build needs: the k8s tests rehearse the image build with GOPROXY=off, and
# a build context that lacks a package makes Go look up modules (such as
# github.com/kr/pretty) that no build of ours downloads.
#
# Both modules' tests run even when the other's fail: each module's result
# is reported on a line of its own at the end, and make fails if either did.
test: redis-server
	$(GO) mod download
	cd k8s && $(GO) mod download
	@main=0; k8s=0; \
	echo "$(GO) vet ./... && $(GO) test -race -count=1 -timeout 20m ./..."; \
	$(GO) vet ./... && $(GO) test -race -count=1 -timeout 20m ./... || main=$$?; \
	echo "cd k8s && $(GO) vet ./... && $(GO) test -count=1 -timeout 5m ./..."; \
	(cd k8s && $(GO) vet ./... && $(GO) test -count=1 -timeout 5m ./...) || k8s=$$?; \
	report() { if [ "$$2" -eq 0 ]; then echo "make test: $$1: ok"; else echo "make test: $$1: FAILED (exit $$2)"; fi; }; \
	report "module . (vet, tests)" $$main; report "module k8s (vet, tests)" $$k8s; \
	[ $$main -eq 0 ] && [ $$k8s -eq 0 ]

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
	$(call go_build,bin/ratelimit-sidecar)

# The checksums are written, then checked, so a release whose SHA256SUMS
# does not match its binaries fails here rather than for a user.
# The artefacts are listed by the release tool, one a line, and checksummed
# in that order.
release: $(RELEASE_BINS)
	cd k8s && $(GO) mod download
	cd k8s && $(GO) run ./release -root .. -bin ../bin -version $(VERSION) -revision $(REVISION) > ../bin/.artefacts
	cd bin && sha256sum $(notdir $(RELEASE_BINS)) $$(sed 's|^../bin/||' .artefacts) > SHA256SUMS
	cd bin && sha256sum --check --strict SHA256SUMS
	@rm -f bin/.artefacts
	@cd bin && ls -l $$(awk '{print $$2}' SHA256SUMS) SHA256SUMS

# bin/ratelimit-sidecar-linux-arm64: GOOS linux, GOARCH arm64. Always
# rebuilt (go build skips what is up to date), so a release never ships a
# binary of an older version.
bin/ratelimit-sidecar-%: FORCE
	GOOS=$(word 1,$(subst -, ,$*)) GOARCH=$(word 2,$(subst -, ,$*)) $(call go_build,$@)

FORCE:

# Needs a Docker engine; CI has none, so it does not run this. For other
# platforms: docker buildx build --platform linux/amd64,linux/arm64 with the
# same build arguments.
image:
	mkdir -p bin
	cd k8s && $(GO) run ./release -print-image-names -repository $(IMAGE) -version $(VERSION) > ../bin/.image-names
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
		$$(sed 's/^/-t /' bin/.image-names) .
	@rm -f bin/.image-names

bench: redis-server
	$(GO) test -run '^$$' -bench . -benchmem ./...
