# The compositor image: one static binary (operator and per-version controllers) and helm, on a
# distroless base with no shell.
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

# helm, pinned and checked. The test bed runs helm 4.3.1 from a PyPI wheel (e2e/install-deps.sh);
# this is the release tarball of the same minor version. Change version and checksum together
# (https://get.helm.sh/helm-<version>-linux-amd64.tar.gz.sha256sum).
FROM debian:bookworm-slim AS helm
ARG HELM_VERSION=v4.3.0
ARG HELM_SHA256=86584a54def73570558f66f5111cc53dfed56689637ae32c1201205d494f54fb
ADD https://get.helm.sh/helm-${HELM_VERSION}-linux-amd64.tar.gz /helm.tar.gz
RUN echo "${HELM_SHA256}  /helm.tar.gz" | sha256sum -c - \
 && tar -xzf /helm.tar.gz -C / linux-amd64/helm \
 && /linux-amd64/helm version --short

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /compositor /usr/local/bin/compositor
COPY --from=helm /linux-amd64/helm /usr/local/bin/helm
# helm keeps its configuration and cache under HOME; the chart mounts a writable /tmp.
ENV HOME=/tmp TMPDIR=/tmp HELM_BIN=/usr/local/bin/helm
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["compositor"]
