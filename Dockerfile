# syntax=docker/dockerfile:1
#
# ratelimit-sidecar: a static binary on distroless, running as a non-root
# user, with the default rules of config/ in /etc/ratelimit-sidecar/.
#
#   make image
#
# or, by hand (make image passes the same arguments):
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) -t ratelimit-sidecar:dev .
#
# The binary is built by `make build`, the command `make release` runs for
# each of its platforms in CI, so the image holds what CI builds
# (CGO_ENABLED=0, -trimpath, version and commit through -ldflags), for the
# image's platform. k8s/dockerfile_test.go checks this file, since no
# Docker engine runs in CI.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY Makefile ./
COPY cmd/ cmd/
COPY pkg/ pkg/
COPY internal/ internal/
# The Makefile takes VERSION and REVISION from the environment; there is no
# .git here.
ARG VERSION=dev
ARG REVISION=
# Cross-compile for the image's platform: go reads GOOS and GOARCH.
ARG TARGETOS TARGETARCH
ENV GOOS=$TARGETOS GOARCH=$TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build make build

FROM gcr.io/distroless/static-debian12:nonroot
# Build arguments end with their stage: the labels need them again.
ARG VERSION=dev
ARG REVISION=
LABEL org.opencontainers.image.title="ratelimit-sidecar" \
      org.opencontainers.image.description="Envoy rate-limit service (RLS v3) to run beside Envoy" \
      org.opencontainers.image.source="https://github.com/ratelimit-sidecar/ratelimit-sidecar" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION"
COPY --from=build /src/bin/ratelimit-sidecar /usr/local/bin/ratelimit-sidecar
# The same binary where envoyproxy/ratelimit's image has its own, so that
# deployments made for that image (Istio's sample, Envoy Gateway:
# command: ["/bin/ratelimit"], the environment, no flags) run unchanged.
# Run by that name, the binary takes the reference's defaults
# (docs/migration.md). A second copy, not a link: distroless has no shell
# to make one, and COPY follows links.
COPY --from=build /src/bin/ratelimit-sidecar /bin/ratelimit
COPY config/ /etc/ratelimit-sidecar/
COPY LICENSE NOTICE /usr/share/doc/ratelimit-sidecar/
# The distroless nonroot user, by number: Kubernetes can check a numeric
# user against runAsNonRoot, not a name.
USER 65532:65532
# 8080: /healthz, /readyz, /metrics. 8081: RLS gRPC. /json and /debug/config
# stay on 127.0.0.1:8082 (--admin-addr).
EXPOSE 8080 8081
# The binary listens on loopback unless told otherwise; in a container that
# is unreachable, so these flags open both ports on every address. Flags
# given after the image name (docker run, Kubernetes args) come later and
# win: k8s/deployment.yaml keeps gRPC on 127.0.0.1. Because flags beat
# RLS_* variables, use flags, not the environment, for --config,
# --grpc-addr and --http-addr.
ENTRYPOINT ["/usr/local/bin/ratelimit-sidecar", "--config=/etc/ratelimit-sidecar/", "--grpc-addr=0.0.0.0:8081", "--http-addr=0.0.0.0:8080", "--admin-addr=127.0.0.1:8082"]
