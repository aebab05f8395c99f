# syntax=docker/dockerfile:1
#
# aerie's container image: one static binary on distroless/static, run as
# the distroless nonroot user (65532). Build it with `make image` (or
# `docker build -t aerie .` from the repository root); the same image runs
# every aerie command: work, aggregate, produce, sim, auth init, ...
#
# The binary is built exactly as `make build` builds it (CGO_ENABLED=0,
# -trimpath, -s -w), so it needs no libc and no ELF interpreter; `make
# deploy-check` builds it the same way and checks that.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so that a change to the source does not download them
# again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# VERSION is what `aerie version` prints; the Makefile passes
# `git describe` (.git is not in the build context).
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/aerie-dev/aerie/schema.buildVersion=${VERSION}" -o /out/aerie ./cmd/aerie
# Directories the nonroot user owns in the final image: a named volume
# mounted on one of them starts with this owner, so the aggregator can
# write /data and `aerie auth init` can write /etc/aerie without root.
RUN mkdir -p /out/data /out/etc-aerie && chmod 0700 /out/data /out/etc-aerie

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="aerie" \
      org.opencontainers.image.description="Regenerates LLM answers for prompts through NATS JetStream: producer, workers beside vLLM, aggregator" \
      org.opencontainers.image.source="https://github.com/aerie-dev/aerie" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /out/aerie /aerie
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build --chown=65532:65532 /out/etc-aerie /etc/aerie
# Numeric, so that Kubernetes' runAsNonRoot can verify it without
# reading /etc/passwd.
USER 65532:65532
# The aggregator's default output root (--data-dir, env AERIE_DATA_DIR).
ENV AERIE_DATA_DIR=/data
ENTRYPOINT ["/aerie"]
CMD ["help"]
