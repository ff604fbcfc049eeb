# syntax=docker/dockerfile:1
# The vgpu node image: libvgpu.so (installed on the host by deploy/install-host.sh, the
# DaemonSet's init container), vgpu-node (the daemon and device plugin) and vgpu (the CLI).
#
#   docker build -t ghcr.io/vgpu-project/vgpu-node:0.1.0 .
#
# docs/deploy.md describes the image and the DaemonSet that runs it.

# Only the CUDA headers are needed (cuda.h, cudaTypedefs.h): the library loads the real driver
# with dlopen and the daemon loads NVML the same way.
ARG CUDA_HEADERS_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04
FROM ${CUDA_HEADERS_IMAGE} AS cuda-headers

# --- build: exactly the README's "build and pass the tests" command, the one .ci/run runs ------
# (tests/deploy/check_manifests.py checks that this RUN line and .ci/run carry the same command).
FROM debian:12 AS build
COPY --from=cuda-headers /usr/local/cuda/include/ /usr/local/cuda/include/
WORKDIR /src
COPY . .
RUN scripts/install-deps.sh && cmake -S . -B build -G Ninja && cmake --build build && ctest --test-dir build --output-on-failure

# --- runtime ---------------------------------------------------------------------------------
FROM debian:12-slim
# The shared libraries vgpu-node and vgpu link against (gRPC, protobuf, abseil via gRPC, curl);
# tests/deploy/check_manifests.py maps every NEEDED entry of build/vgpu-node and build/vgpu to
# its Debian package and checks it is listed here. libvgpu.so needs only libc.
ARG RUNTIME_PACKAGES="libgrpc++1.51 libgrpc29 libabsl20220623 libprotobuf32 libcurl4 libstdc++6 libgcc-s1 libc6 ca-certificates"
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${RUNTIME_PACKAGES} \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/libvgpu.so /opt/vgpu/lib/libvgpu.so
COPY --from=build /src/build/vgpu-node /src/build/vgpu /opt/vgpu/bin/
COPY deploy/install-host.sh /opt/vgpu/install-host.sh
ENV PATH=/opt/vgpu/bin:$PATH
# Fails the build when a runtime library is missing from RUNTIME_PACKAGES, or vgpu-node was built
# without the Kubernetes modes (their optional dependencies missing in the build stage).
RUN /opt/vgpu/bin/vgpu --help >/dev/null && /opt/vgpu/install-host.sh --help >/dev/null \
    && /opt/vgpu/bin/vgpu-node --help | grep -q "^  hami " \
    && /opt/vgpu/bin/vgpu-node --help | grep -q "^  volcano " \
    && /opt/vgpu/bin/vgpu-node --help | grep -q "^  standalone "
ENTRYPOINT ["/opt/vgpu/bin/vgpu-node"]
