# etcd from Debian's packages, the same build the project is tested against, run as the package's user.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends etcd-server etcd-client \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/etcd && chown etcd:etcd /var/lib/etcd
USER etcd
EXPOSE 2379 2380
ENTRYPOINT ["/usr/bin/etcd"]
