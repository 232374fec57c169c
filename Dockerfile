# The compositor image: one static binary (operator and per-version controllers) and the
# resident Helm engine, on a distroless base with no shell.
#
#   docker build -t compositor:0.1.0 .

# A static musl binary, so the final image needs no libc.
FROM rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin compositor \
 && cp target/x86_64-unknown-linux-musl/release/compositor /compositor

# helm-engine: Helm's own command line, linked in and resident (helm-engine/), built with the
# Helm release its go.mod pins; `helm version` names that release, as the helm binary does.
FROM golang:1.26-bookworm AS engine
WORKDIR /src
COPY helm-engine/ .
RUN version=$(sed -n 's#^require helm.sh/helm/v4 \(v[0-9.]*\)$#\1#p' go.mod) \
 && CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=${version}" -o /helm-engine . \
 && printf '%s\n' '{"args":["version","--short"],"env":{}}' | /helm-engine

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /compositor /usr/local/bin/compositor
COPY --from=engine /helm-engine /usr/local/bin/helm-engine
# Each Helm call keeps its state in a private directory under TMPDIR; the chart mounts a
# writable /tmp.
ENV HOME=/tmp TMPDIR=/tmp HELM_ENGINE=/usr/local/bin/helm-engine
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["compositor"]
