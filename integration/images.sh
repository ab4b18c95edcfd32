#!/usr/bin/env bash
# Builds the container images of the testcontainers providers, locally: no
# container registry is used. Every image starts from a Debian base made
# with debootstrap and imported with `docker import`; packages come from
# Debian's archive (the mirror apt uses on this machine, read at run time),
# and Kafka's jars are the ones integration/kafka.sh fetches from Maven
# Central. See integration/README.md.
#
#   integration/images.sh build     build what is missing or out of date;
#                                   prints REDELIVER_TC_KAFKA_IMAGE=... and
#                                   REDELIVER_TC_POSTGRES_IMAGE=... lines
#   integration/images.sh list      the images and their tags
#
# Images (the tag ends in a hash of the recipe and its inputs; the short tag
# names the newest build, and is what the providers run by default):
#   redeliver/debian:bookworm   debootstrap --variant=minbase bookworm
#   redeliver/jre:17            + openjdk-17-jre-headless
#   redeliver/kafka:<version>   + Kafka's jars and integration/kafka.sh, whose
#                               "foreground" command is the container's; the
#                               storage is formatted at build time
#   redeliver/postgres:15       + postgresql-15, a cluster made by initdb
#                               (user postgres, trust authentication)
# An image is rebuilt when its recipe (this script's function that builds
# it), its parent image or its inputs (package names, the Kafka version and
# jar list, kafka.sh) change. Debian's package updates alone do not rebuild
# it: REDELIVER_IMAGES_REBUILD=1 rebuilds everything.
#
# The Docker engine is DOCKER_HOST's, or else the private one of
# integration/docker.sh (which must run); never another. The mirror is
# read from apt's configuration and given to debootstrap and to the build
# containers through a read-only mount: no image keeps it (the build
# checks the images' /etc and /var for its host name).
#
# stdout carries only the image lines; messages go to stderr.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SUITE=bookworm
KAFKA_VERSION=${REDELIVER_KAFKA_VERSION:-4.3.1}
KAFKA_CACHE=${REDELIVER_KAFKA_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/redeliver/kafka-$KAFKA_VERSION}
JRE_PACKAGES="openjdk-17-jre-headless"
PG_MAJOR=15
PG_PACKAGES="postgresql-$PG_MAJOR"

say() { printf 'images.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

if [ -z "${DOCKER_HOST:-}" ]; then
  line=$(bash "$HERE/docker.sh" status 2>/dev/null) || die "DOCKER_HOST is unset and integration/docker.sh's engine does not run (integration/docker.sh start)"
  export "${line?}"
fi
dk() { if [ -x /usr/bin/docker ]; then /usr/bin/docker "$@"; else docker "$@"; fi; }

# inputs_hash prints a short hash of its arguments and stdin.
inputs_hash() { { printf '%s\n' "$@"; cat; } | sha256sum | cut -c1-12; }

have_image() { dk image inspect "$1" >/dev/null 2>&1; }

# prune_old <repo> <keep>: removes the repo's other hashed tags (older builds).
prune_old() {
  local ref
  for ref in $(dk image ls --format '{{.Repository}}:{{.Tag}}' "$1"); do
    case $ref in "$2" | *:"${2##*:}") continue ;; esac
    [[ ${ref##*:} == *-[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f] ]] || continue
    dk image rm "$ref" >/dev/null 2>&1 || true
  done
}

# ---------------------------------------------------------------- mirror

# read_mirror sets MIRROR (the archive's URI for $SUITE) and SOURCES (a
# sources.list of the $SUITE* archives apt uses here: the suite, its updates
# and its security archive), from apt's own configuration.
read_mirror() {
  [ -n "${MIRROR:-}" ] && return 0
  command -v apt-get >/dev/null || die "apt-get is needed to read Debian's mirror"
  local targets
  targets=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(TARGET_OF)' 2>/dev/null |
    awk -v s="$SUITE" '$4 == "deb" && ($2 == s || index($2, s "-") == 1)' | sort -u)
  MIRROR=$(awk -v s="$SUITE" '$2 == s {print $1; exit}' <<<"$targets")
  [ -n "$MIRROR" ] || die "apt here has no $SUITE archive (apt-get indextargets); the images are built from Debian $SUITE"
  SOURCES=$(awk '{print "deb " $1 " " $2 " " $3}' <<<"$targets")
  MIRROR_HOSTS=$(awk '{print $1}' <<<"$targets" | sed -E 's,^[a-z+]+://([^/@]*@)?([^/:]*).*,\2,' | sort -u)
  # debootstrap fetches with wget, which reads http_proxy.
  eval "$(apt-config shell http_proxy Acquire::http::Proxy https_proxy Acquire::https::Proxy)"
  export http_proxy https_proxy
}

# with_packages <parent> <name> <tag> <install script> [commit --change ...]:
# runs the script in a container of the parent with apt's sources mounted
# read-only (so they are not in the image), then commits it as tag.
with_packages() {
  local parent=$1 name=$2 tag=$3 script=$4
  shift 4
  read_mirror
  local tmp
  tmp=$(mktemp -d)
  printf '%s\n' "$SOURCES" >"$tmp/sources.list"
  {
    [ -n "${http_proxy:-}" ] && printf 'Acquire::http::Proxy "%s";\n' "$http_proxy"
    [ -n "${https_proxy:-}" ] && printf 'Acquire::https::Proxy "%s";\n' "$https_proxy"
    :
  } >"$tmp/proxy.conf"
  dk rm -f "$name" >/dev/null 2>&1 || true
  if ! dk run --name "$name" --network host \
    -v "$tmp/sources.list:/etc/apt/sources.list:ro" \
    -v "$tmp/proxy.conf:/etc/apt/apt.conf.d/99redeliver-build-proxy:ro" \
    -e DEBIAN_FRONTEND=noninteractive "$parent" bash -euc "$script
      rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb" >"$tmp/build.log" 2>&1; then
    tail -n 30 "$tmp/build.log" >&2
    dk rm -f "$name" >/dev/null 2>&1 || true
    rm -rf "$tmp"
    die "building $tag failed"
  fi
  dk commit "$@" "$name" "$tag" >/dev/null
  dk rm -f "$name" >/dev/null
  rm -rf "$tmp"
}

# check_clean <image>: the image's /etc and /var name none of the mirror's hosts.
check_clean() {
  read_mirror
  local h found
  for h in $MIRROR_HOSTS; do
    found=$(dk run --rm --network none --entrypoint "" -u 0 "$1" grep -rIlF -- "$h" /etc /var 2>/dev/null || true)
    if [ -n "$found" ]; then
      say "image $1 keeps the mirror's host name in: $found"
      return 1
    fi
  done
}

# ---------------------------------------------------------------- images

build_base() {
  local tag=$1
  command -v debootstrap >/dev/null || {
    say "installing Debian's debootstrap"
    apt-get -q -o DPkg::Lock::Timeout=120 update >/dev/null &&
      DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=120 install --no-install-recommends debootstrap >/dev/null ||
      die "could not install debootstrap"
  }
  read_mirror
  local tmp
  tmp=$(mktemp -d)
  if ! debootstrap --variant=minbase "$SUITE" "$tmp/rootfs" "$MIRROR" >"$tmp/debootstrap.log" 2>&1; then
    tail -n 30 "$tmp/debootstrap.log" >&2
    rm -rf "$tmp"
    die "debootstrap failed"
  fi
  # No mirror in the image: apt's sources, lists and caches go; builds on
  # top mount their own sources.
  printf '# Packages were installed when the image was built (integration/images.sh);\n# no archive is configured.\n' >"$tmp/rootfs/etc/apt/sources.list"
  rm -rf "$tmp/rootfs/var/cache/apt/archives/"*.deb "$tmp/rootfs/var/lib/apt/lists/"*_* "$tmp/rootfs/var/cache/apt/"*.bin \
    "$tmp/rootfs/var/log/bootstrap.log"
  tar -C "$tmp/rootfs" -c . | dk import --change 'CMD ["bash"]' - "$tag" >/dev/null
  rm -rf "$tmp"
}

build_jre() {
  local parent=$1 tag=$2
  with_packages "$parent" redeliver-build-jre "$tag" \
    "apt-get -q update; apt-get -q -y install --no-install-recommends $JRE_PACKAGES; java -version" \
    --change 'CMD ["bash"]'
}

build_kafka() {
  local parent=$1 tag=$2 tmp name=redeliver-build-kafka
  tmp=$(mktemp -d)
  mkdir -p "$tmp/kafka"
  cp -a "$KAFKA_CACHE/libs" "$KAFKA_CACHE/jars.txt" "$KAFKA_CACHE/.complete" "$tmp/kafka/"
  cp "$HERE/kafka.sh" "$tmp/kafka/kafka.sh"
  dk rm -f "$name" >/dev/null 2>&1 || true
  local env=(-e REDELIVER_KAFKA_VERSION="$KAFKA_VERSION" -e REDELIVER_KAFKA_CACHE=/opt/kafka -e REDELIVER_KAFKA_DIR=/tmp/kafka)
  dk create --name "$name" --network none "${env[@]}" "$parent" \
    bash -euc 'bash /opt/kafka/kafka.sh template; rm -rf /tmp/kafka /opt/kafka.lock' >/dev/null
  dk cp "$tmp/kafka" "$name:/opt/kafka"
  if ! dk start -a "$name" >"$tmp/build.log" 2>&1; then
    cat "$tmp/build.log" >&2
    dk rm -f "$name" >/dev/null 2>&1 || true
    rm -rf "$tmp"
    die "formatting Kafka's storage in $tag failed"
  fi
  dk commit \
    --change "ENV REDELIVER_KAFKA_VERSION=$KAFKA_VERSION" \
    --change 'ENV REDELIVER_KAFKA_CACHE=/opt/kafka' \
    --change 'ENV REDELIVER_KAFKA_DIR=/var/lib/kafka' \
    --change 'CMD ["bash", "/opt/kafka/kafka.sh", "foreground"]' \
    "$name" "$tag" >/dev/null
  dk rm -f "$name" >/dev/null
  rm -rf "$tmp"
}

build_postgres() {
  local parent=$1 tag=$2 bin=/usr/lib/postgresql/$PG_MAJOR/bin
  # No cluster from the package (createcluster.d), one made by initdb for
  # the image's command: postgres on 127.0.0.1 and $PGPORT (default 5432),
  # durability off (a test's database is thrown away).
  with_packages "$parent" redeliver-build-postgres "$tag" "
    mkdir -p /etc/postgresql-common/createcluster.d
    echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/redeliver.conf
    apt-get -q update
    apt-get -q -y install --no-install-recommends $PG_PACKAGES
    install -d -o postgres -g postgres /var/lib/postgresql/data
    runuser -u postgres -- $bin/initdb -D /var/lib/postgresql/data -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    cat >/usr/local/bin/redeliver-postgres <<'EOF'
#!/bin/sh
# The image's command (integration/images.sh): PostgreSQL on 127.0.0.1:\${PGPORT:-5432}.
exec $bin/postgres -D /var/lib/postgresql/data -p \"\${PGPORT:-5432}\" \\
  -c listen_addresses=127.0.0.1 -c unix_socket_directories=/tmp \\
  -c fsync=off -c synchronous_commit=off -c full_page_writes=off \"\$@\"
EOF
    chmod 755 /usr/local/bin/redeliver-postgres" \
    --change 'USER postgres' \
    --change 'CMD ["/usr/local/bin/redeliver-postgres"]'
}

# image <repo> <short tag> <recipe function> <parent or -> <inputs...>:
# makes sure <repo>:<short tag>-<hash> exists (building it if not) and that
# <repo>:<short tag> names it; sets IMAGE to the hashed tag.
image() {
  local repo=$1 short=$2 fn=$3 parent=$4
  shift 4
  local h tag t0=$SECONDS
  h=$(declare -f "$fn" with_packages | inputs_hash "$parent" "$@")
  tag=$repo:$short-$h
  if [ "${REDELIVER_IMAGES_REBUILD:-}" = 1 ] && [ -z "${REBUILT[$tag]:-}" ]; then
    dk image rm -f "$tag" >/dev/null 2>&1 || true
  fi
  if ! have_image "$tag"; then
    say "building $tag"
    if [ "$parent" = - ]; then "$fn" "$tag"; else "$fn" "$parent" "$tag"; fi
    check_clean "$tag" || { dk image rm -f "$tag" >/dev/null 2>&1; die "removed $tag"; }
    REBUILT[$tag]=1
    say "built $tag in $((SECONDS - t0)) s ($(dk image inspect --format '{{.Size}}' "$tag" | awk '{printf "%d MB", $1/1e6}'))"
  fi
  dk tag "$tag" "$repo:$short"
  prune_old "$repo" "$tag"
  IMAGE=$tag
}

build() {
  declare -gA REBUILT=()
  local t0=$SECONDS base jre kafka pg
  image redeliver/debian "$SUITE" build_base - "$SUITE" "$(uname -m)"
  base=$IMAGE
  image redeliver/jre 17 build_jre "$base" "$JRE_PACKAGES"
  jre=$IMAGE
  bash "$HERE/kafka.sh" fetch >/dev/null
  image redeliver/kafka "$KAFKA_VERSION" build_kafka "$jre" "$KAFKA_VERSION" \
    "$(cat "$KAFKA_CACHE/jars.txt")" "$(sha256sum <"$HERE/kafka.sh")"
  kafka=$IMAGE
  image redeliver/postgres "$PG_MAJOR" build_postgres "$base" "$PG_PACKAGES"
  pg=$IMAGE
  say "images ready in $((SECONDS - t0)) s"
  printf 'REDELIVER_TC_KAFKA_IMAGE=%s\n' "$kafka"
  printf 'REDELIVER_TC_POSTGRES_IMAGE=%s\n' "$pg"
}

case ${1:-} in
build) build ;;
list) dk image ls 'redeliver/*' ;;
*)
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
  ;;
esac
