# anteroom as a static, non-root container image.
#
#   podman build -t anteroom .        (or docker build)
#   podman run -p 8080:8080 -v anteroom-data:/data anteroom
#
# The build is CGO_ENABLED=0: modernc.org/sqlite is pure Go, so the binary is
# static and the runtime image holds nothing but it, CA certificates and
# time zones (distroless/static), running as the unprivileged user nonroot
# (65532). The database lives in /data, a volume owned by that user.
# Configure with ANTEROOM_* variables or mount a file and pass
# -config /etc/anteroom/anteroom.yaml; `anteroom -h` lists every key.

ARG GO_VERSION=1.26

FROM docker.io/library/golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/anteroom ./cmd/anteroom \
 && mkdir /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/anteroom /usr/local/bin/anteroom
COPY --from=build /src/config.example.yaml /etc/anteroom/config.example.yaml
COPY --from=build --chown=65532:65532 /out/data /data
WORKDIR /data
ENV ANTEROOM_LISTEN=0.0.0.0:8080 \
    ANTEROOM_DATABASE=/data/anteroom.db
VOLUME /data
EXPOSE 8080
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/anteroom"]
