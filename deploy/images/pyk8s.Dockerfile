# The pyk8s images, one target per role (docker-compose.yml picks it):
#   control-plane  apiserver, scheduler, controller-manager, DNS, image registry; runs as user pyk8s
#   node           containerd, runc, CNI plugins and iptables next to pyk8s; runs as root
# Dependencies come from requirements.lock in a layer before the source, and the system packages
# before that, so a source change rebuilds only the last layer of each target.
FROM python:3.11-slim-bookworm AS deps
# the source is imported where it lies (no wheel of it is built): every target runs `python -m <component>`
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/opt/pyk8s
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
RUN python -m deploy.compose images /opt/pyk8s-images

FROM node-tools AS node
COPY . .
ENTRYPOINT ["python", "-m", "deploy.compose", "node"]

FROM deps AS control-plane
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/pyk8s pyk8s \
    && mkdir -p /var/lib/pyk8s && chown pyk8s:pyk8s /var/lib/pyk8s
COPY --from=images --chown=pyk8s:pyk8s /opt/pyk8s-images/registry /opt/pyk8s-images/registry
COPY . .
USER pyk8s
