# syntax=docker/dockerfile:1
# The KubeNexus Gang Admission image: `kubenexus webhook` and `kubenexus controller` (deploy/).
#   docker build -t kubenexus-gang-admission:0.2.0 .
# The base is pinned to an exact Python patch release and Debian release; to pin it by digest as well:
#   docker build --build-arg PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:<digest> ...
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
# The project's version (pyproject.toml, the one source): the image's version label. The build fails unless the
# installed `kubenexus --version` says the same (tests/test_release.py checks this default against pyproject.toml).
ARG VERSION=0.2.0

# --- build: install the project (pip install .) into a self-contained virtual environment ---------------
FROM ${PYTHON_IMAGE} AS build
ARG VERSION
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/kubenexus
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kubenexus/ kubenexus/
COPY gang/ gang/
COPY kube/ kube/
COPY webhook/ webhook/
COPY certs/ certs/
COPY cluster/ cluster/
COPY controller/ controller/
COPY workloads/ workloads/
# Installs the wheel built from this tree and its dependencies (byte-compiled), then drops the installers.
RUN /opt/kubenexus/bin/pip install . \
 && /opt/kubenexus/bin/pip uninstall --yes pip setuptools \
 && /opt/kubenexus/bin/kubenexus --help > /dev/null \
 && test "$(/opt/kubenexus/bin/kubenexus --version)" = "kubenexus ${VERSION}"

# --- runtime: the same slim base, the virtual environment, nothing else ---------------------------------
FROM ${PYTHON_IMAGE}
ARG VERSION
LABEL org.opencontainers.image.title="kubenexus-gang-admission" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.description="KubeNexus gang admission: mutating/validating webhook and gate controller" \
      org.opencontainers.image.licenses="Apache-2.0"
# The runtime needs no installer: remove the base image's pip and setuptools too.
RUN python -m pip uninstall --yes pip setuptools wheel
COPY --from=build /opt/kubenexus /opt/kubenexus
ENV PATH=/opt/kubenexus/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# Non-root, numeric (so runAsNonRoot can verify it); the Deployments set the same uid and a read-only root
# filesystem, with an emptyDir at /tmp. Probes and preStop hooks use python, never a shell.
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["kubenexus"]
CMD ["--help"]
