# The pyk8s images, one target per role (docker-compose.yml picks it):
#   control-plane  apiserver, scheduler, controller-manager, DNS, image registry; runs as user pyk8s
#   node           containerd, runc, CNI plugins and iptables next to pyk8s; runs as root
# Dependencies come from requirements.lock in a layer before the source, and the system packages
# before that, so a source change rebuilds only the last two layers of each target.
FROM python:3.11-slim-bookworm AS deps
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /opt/pyk8s
COPY deploy/images/requirements.lock /opt/pyk8s-requirements.lock
RUN pip install --no-deps -r /opt/pyk8s-requirements.lock

FROM deps AS node-tools
RUN apt-get update \
    && apt-get install -y --no-install-recommends containerd runc containernetworking-plugins iptables \
       nftables conntrack iproute2 util-linux procps \
    && rm -rf /var/lib/apt/lists/*

FROM deps AS image-tools
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev busybox-static \
    && rm -rf /var/lib/apt/lists/*

# busybox and pause for the cluster's registry, built as `pyk8s up` builds them.
FROM image-tools AS images
COPY . .
RUN pip install --no-deps --no-build-isolation . && rm -rf build *.egg-info \
    && python -m deploy.compose images /opt/pyk8s-images

FROM node-tools AS node
COPY . .
RUN pip install --no-deps --no-build-isolation . && rm -rf build *.egg-info
ENTRYPOINT ["python", "-m", "deploy.compose", "node"]

FROM deps AS control-plane
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/pyk8s pyk8s \
    && mkdir -p /var/lib/pyk8s && chown pyk8s:pyk8s /var/lib/pyk8s
COPY --from=images --chown=pyk8s:pyk8s /opt/pyk8s-images/registry /opt/pyk8s-images/registry
COPY . .
RUN pip install --no-deps --no-build-isolation . && rm -rf build *.egg-info
USER pyk8s
